// Three people debug one thread in the inspector. Cat opens a link to it
// before anyone ran; Ann runs twice (her reply goes to the thread's agent,
// no agent picked); Ben views the first run: the state shown is that run's,
// the URL names it, a timeline row opens to its event's JSON with a
// millisecond time and the run's duration; then Ben continues from that
// run, and everyone's run list shows the branch; Ben closes his window and
// the other two see him leave. Prints one JSON object;
// tests/inspector.rs asserts on it. Every wait is for the page's DOM.
//
// usage: node inspector_debug.mjs <base url> <base url 2> <thread>
import { chromium } from "playwright-core";

const [base, base2, thread] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 30_000;
const out = { errors: [] };

async function person(name, at, hash = "") {
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  page.on("pageerror", (e) => out.errors.push(`${name}: ${e}`));
  await page.goto(`${at}/inspector/`);
  await page.waitForSelector("#dev-mint:not([hidden])", { timeout: WAIT });
  await page.fill("#dev-sub", name);
  await page.click("#dev-mint-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  if (hash) {
    await page.goto(`${at}/inspector/${hash}`);
    await page.reload();
    await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  }
  return page;
}

const finishedRuns = (page, n) => page.waitForFunction((k) => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= k, n, { timeout: WAIT });
const runItems = (page, n) => page.waitForFunction((k) => document.querySelectorAll("#runs .run-item").length >= k, n, { timeout: WAIT });

try {
  const cat = await person("cat", base2, `#thread=${thread}`);
  const ann = await person("ann", base);
  await ann.selectOption("#agent-select", "demo");
  await ann.fill("#run-thread", thread);
  await ann.fill("#run-message", "alpha");
  await ann.click("#run-start");
  await finishedRuns(ann, 1);
  // The reply: no agent named, the thread's goes on.
  await ann.selectOption("#agent-select", "other");
  await ann.fill("#reply-message", "beta");
  await ann.click("#reply-send");
  await finishedRuns(ann, 2);
  await runItems(ann, 2);
  out.annRunAgents = await ann.$$eval("#runs .run-item small", (s) => s.map((x) => x.textContent));

  const ben = await person("ben", base2);
  await ben.click(`.thread-item[data-thread="${thread}"]`);
  await runItems(ben, 2);
  await ben.waitForFunction(() => document.querySelector("#state-tree").textContent.includes("beta"), null, { timeout: WAIT });
  // Ben joined late: his timeline starts at a snapshot; he loads what came before.
  out.benRowsBefore = await ben.$$eval(".tl-row", (r) => r.map((x) => x.dataset.type));
  await ben.click("#timeline-earlier");
  // Loaded when the row just above the snapshot's is the snapshot's seq
  // (rows arrive one by one from seq 1: the first row alone is not the end).
  await ben.waitForFunction(() => {
    const rows = [...document.querySelectorAll(".tl-row")];
    const at = rows.findIndex((r) => r.dataset.type === "snapshot");
    return at > 0 && rows[0].dataset.seq === "1" && rows[at - 1].dataset.seq === rows[at].dataset.seq;
  }, null, { timeout: WAIT });
  out.benRowsAfter = await ben.$$eval(".tl-row", (r) => r.map((x) => [Number(x.dataset.seq), x.dataset.type]));
  const first = await ben.$eval("#runs .run-item", (i) => i.dataset.run);
  await ben.click(`#runs .run-item[data-run="${first}"] .run-view`);
  await ben.waitForSelector("#run-view:not([hidden])", { timeout: WAIT });
  await ben.waitForFunction(() => document.querySelector("#state-tree").textContent.includes("alpha"), null, { timeout: WAIT });
  out.benStateAtFirst = await ben.$eval("#state-tree", (e) => e.textContent);
  out.benUrl = await ben.evaluate(() => location.hash);
  out.firstRun = first;

  // Cat, there from the start: every row; one opens to its JSON.
  await finishedRuns(cat, 2);
  const finished = '.tl-row[data-type="RUN_FINISHED"]';
  out.catFinishedRow = await cat.$eval(finished, (r) => [...r.children].map((c) => c.textContent));
  await cat.click(finished);
  await cat.waitForSelector(".tl-json pre", { timeout: WAIT });
  out.catJson = JSON.parse(await cat.$eval(".tl-json pre", (p) => p.textContent));
  await cat.waitForFunction(() => document.querySelectorAll("#presence .avatar").length === 3, null, { timeout: WAIT });
  out.catAvatars = await cat.$$eval("#presence .avatar", (a) => a.map((x) => x.dataset.user).sort());

  // Ben continues from the first run: a branch, seen by all.
  await ben.fill("#reply-message", "gamma");
  await ben.click("#run-continue");
  for (const page of [ann, ben, cat]) await finishedRuns(page, page === ben ? 1 : 3);
  await runItems(cat, 3);
  out.catRuns = await cat.$$eval("#runs .run-item", (i) => i.map((x) => ({ run: x.dataset.run, parent: x.dataset.parent, kind: x.dataset.kind })));
  out.benUrlAfter = await ben.evaluate(() => location.hash);

  // Ben closes his window: Ann (on the other node) and Cat see him leave.
  await ben.context().close();
  const twoLeft = () => [...document.querySelectorAll("#presence .avatar")].map((a) => a.dataset.user).sort().join() === "ann,cat";
  for (const [who, page] of [["ann", ann], ["cat", cat]]) {
    await page.waitForFunction(twoLeft, null, { timeout: WAIT });
    out[`${who}AvatarsAfterBenLeft`] = await page.$$eval("#presence .avatar", (a) => a.map((x) => x.dataset.user).sort());
  }
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
