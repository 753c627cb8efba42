// Branches in the inspector: Ann asks the scripted "history" agent two
// questions on a new thread, regenerates the second answer and then edits
// the second question, all from the page; Ben has the thread open in a
// second browser. Both conversations follow the head (the newest answer
// only), the run list shows the siblings, and choosing an older sibling
// shows the conversation at its end (read-only) until "Back to live".
// Prints one JSON object; tests/inspector.rs asserts on it. Every wait is
// for the page's DOM.
//
// usage: node inspector_branch.mjs <base url> <token> <thread> [screenshot dir]
import { chromium } from "playwright-core";

const [base, token, thread, shots] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 20_000;
const out = { errors: [] };

async function signedIn(name) {
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  page.on("pageerror", (e) => out.errors.push(`${name}: ${e}`));
  await page.goto(`${base}/inspector/`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  return page;
}

/** The messages a conversation box shows: `role:text`. */
const shown = (page, box = "#conversation") => page.$$eval(`${box} > .msg`, (m) => m.map((x) => `${x.dataset.role}:${x.querySelector(".body").textContent}`));

/** The ids of the messages a conversation box shows. */
const ids = (page, box = "#conversation") => page.$$eval(`${box} > .msg`, (m) => m.map((x) => x.dataset.id));

/** The run list: run id, its base, n/m among its siblings, head/viewing marks. */
const runList = (page) => page.$$eval("#runs .run-item", (items) => items.map((i) => ({
  run: i.dataset.run,
  parent: i.dataset.parent,
  kind: i.dataset.kind,
  sibling: i.querySelector(".sibling")?.textContent ?? null,
  head: i.classList.contains("head"),
  viewing: i.classList.contains("viewing"),
  text: i.textContent,
})));

/** Waits until `page`'s live view has finished `runs` runs in all, the
 *  run list agrees, and the last assistant message is the head's answer. */
async function settled(page, runs) {
  await page.waitForFunction((n) => {
    const items = document.querySelectorAll("#runs .run-item");
    const head = document.querySelector("#runs .run-item.head");
    const status = document.querySelector("#run-status").textContent;
    const answers = [...document.querySelectorAll('#conversation > .msg[data-role="assistant"]')];
    return items.length === n && head && head.textContent.includes(" · finished")
      && status === `finished · ${head.dataset.run}` && answers.at(-1)?.dataset.id === `a-${head.dataset.run}`;
  }, runs, { timeout: WAIT });
}

try {
  const ann = await signedIn("ann");
  await ann.selectOption("#agent-select", "h");
  await ann.fill("#run-thread", thread);
  await ann.fill("#run-message", "one");
  await ann.click("#run-start");
  await settled(ann, 1);
  await ann.fill("#reply-message", "two");
  await ann.click("#reply-send");
  await settled(ann, 2);
  const ben = await signedIn("ben");
  await ben.click(`.thread-item[data-thread="${thread}"]`);
  await settled(ben, 2);
  out.before = await shown(ann);

  // Regenerate the second answer from Ann's page.
  const old = await ann.$eval('#conversation > .msg[data-role="assistant"]:last-of-type', (m) => m.dataset.id);
  out.replaced = old;
  await ann.click(`#conversation > .msg[data-id="${old}"] .regenerate`);
  for (const page of [ann, ben]) await settled(page, 3);
  out.afterRegenerate = { ann: await shown(ann), ben: await shown(ben), annIds: await ids(ann), benIds: await ids(ben), runs: await runList(ann), benRuns: await runList(ben) };

  // The older sibling: the conversation at its end, read-only.
  const oldRun = old.replace(/^a-/, "");
  await ann.click(`#runs .run-item[data-run="${oldRun}"] .run-view`);
  await ann.waitForSelector("#conversation-at > .msg", { timeout: WAIT });
  out.atOld = {
    shown: await shown(ann, "#conversation-at"),
    ids: await ids(ann, "#conversation-at"),
    liveHidden: await ann.$eval("#conversation", (c) => c.hidden),
    label: await ann.$eval("#run-view-label", (l) => l.textContent),
    runs: await runList(ann),
  };
  if (shots) await ann.screenshot({ path: `${shots}/inspector-branches.png`, fullPage: true });
  await ann.click("#run-view-live");
  out.backToLive = { shown: await shown(ann), atHidden: await ann.$eval("#conversation-at", (c) => c.hidden) };

  // Edit the second question from Ann's page: a third sibling.
  await ann.locator('#conversation > .msg[data-role="user"]').nth(1).locator(".edit").click();
  await ann.fill("#conversation .edit-form .edit-text", "two, edited");
  await ann.click("#conversation .edit-form .edit-send");
  for (const page of [ann, ben]) await settled(page, 4);
  out.afterEdit = { ann: await shown(ann), ben: await shown(ben), annIds: await ids(ann), runs: await runList(ben) };
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
