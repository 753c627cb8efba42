// Drives the inspector page in a real headless Chromium (Debian's package,
// through playwright-core): two people, two browser contexts, one thread.
// Prints one JSON object with what each saw; tests/inspector.rs asserts on it.
//
// usage: node inspector.mjs <gateway base url> <token A> <token B> <gated agent release url> [screenshot dir]
import { chromium } from "playwright-core";

const [base, tokenA, tokenB, release, shots] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
const out = {};
const WAIT = 30_000;

async function person(token) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(`${base}/inspector`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  return { context, page, errors };
}

/** `[seq, type]` of every timeline row. */
const timeline = (page) => page.$$eval(".tl-row", (rows) => rows.map((r) => [Number(r.dataset.seq), r.dataset.type]));
const count = (page, type) => page.$$eval(`.tl-row[data-type="${type}"]`, (rows) => rows.length);
const until = (page, fn, arg) => page.waitForFunction(fn, arg, { timeout: WAIT });
// Ann's page, for what it showed when a step timed out.
let annPage = null;

try {
  // Ann signs in and asks the demo agent for a transfer: it streams, then
  // stops for an approval.
  const ann = await person(tokenA);
  annPage = ann.page;
  out.tokenInUrl = ann.page.url().includes(tokenA);
  await ann.page.selectOption("#agent-select", "demo");
  await ann.page.fill("#run-thread", "shared-1");
  await ann.page.fill("#run-message", "please transfer 25 EUR to bob");
  // The run status as the first streamed text arrives (noted in the page:
  // a busy machine may poll only after the run has already stopped).
  await ann.page.evaluate(() => {
    const observer = new MutationObserver(() => {
      if (!document.querySelector('.tl-row[data-type="TEXT_MESSAGE_CONTENT"]')) return;
      window.statusAtFirstText = document.querySelector("#run-status").textContent;
      observer.disconnect();
    });
    observer.observe(document.querySelector("#timeline tbody"), { childList: true });
  });
  await ann.page.click("#run-start");
  await until(ann.page, () => window.statusAtFirstText !== undefined);
  out.streamedWhileRunning = await ann.page.evaluate(() => window.statusAtFirstText.startsWith("running"));
  await ann.page.waitForSelector(".interrupt .approve", { timeout: WAIT });
  out.annRowsAtInterrupt = await timeline(ann.page);

  // Ben, a second person, opens the same thread: one snapshot row, at the
  // seq of the last event Ann has.
  const ben = await person(tokenB);
  await ben.page.click("#threads-refresh");
  await ben.page.click('.thread-item[data-thread="shared-1"]', { timeout: WAIT });
  await ben.page.waitForSelector(".interrupt .approve", { timeout: WAIT });
  out.benRowsAtInterrupt = await timeline(ben.page);

  // The form offers what the agent proposed; Ben changes the amount, then
  // approves: the run continues with his amount, for both of them.
  const field = (name) => ben.page.$eval(`.interrupt [data-field="${name}"]`, (e) => e.value);
  out.benProposed = { amount: await field("amount"), to: await field("to") };
  if (shots) await ben.page.screenshot({ path: `${shots}/inspector-interrupt.png`, fullPage: true });
  await ben.page.fill('.interrupt [data-field="amount"]', "30");
  await ben.page.click(".interrupt .approve");
  await until(ann.page, () => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 2);
  await until(ben.page, () => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 1);
  out.annRunFinished = await count(ann.page, "RUN_FINISHED");
  out.annStatus = await ann.page.$eval("#run-status", (e) => e.textContent);
  out.annState = await ann.page.$eval("#state-tree", (e) => e.textContent);
  out.annReply = (await ann.page.$$eval('.msg[data-role="assistant"] .body', (m) => m.map((x) => x.textContent))).pop();
  // What both saw live, after Ben's snapshot: the same seqs and types.
  out.annRowsAfterApproval = await timeline(ann.page);
  out.benRowsAfterApproval = await timeline(ben.page);
  // No CUSTOM is expected here; if one shows, what it is (its row's JSON).
  out.annCustomJson = [];
  for (const row of await ann.page.$$('.tl-row[data-type="CUSTOM"]')) {
    await row.click();
    out.annCustomJson.push(await (await ann.page.waitForSelector(".tl-json pre", { timeout: WAIT })).textContent());
    await row.click();
  }

  // Ben's thumbs-up reaches Ann live.
  await ben.page.click("#thumbs-up");
  await ann.page.waitForSelector('.meta-item[data-meta-type="thumbs_up"]', { timeout: WAIT });
  out.annSawThumbsUp = await ann.page.$eval('.meta-item[data-meta-type="thumbs_up"]', (e) => e.textContent);

  // A second run; Ann reloads her page mid-stream and misses nothing. The
  // thread goes to the scripted "gated" agent, which writes "part1" and
  // holds the run open until released: the reloaded page provably joins a
  // run still going (with the demo agent a reload on a loaded machine could
  // land after the run had ended, and the page rightly showed only a
  // snapshot of the finished run).
  const switched = await fetch(`${base}/v1/threads/shared-1/agent`, {
    method: "POST",
    headers: { authorization: `Bearer ${tokenA}`, "content-type": "application/json" },
    body: JSON.stringify({ agent: "gated" }),
  });
  out.switchStatus = switched.status;
  await ann.page.fill("#reply-message", "tell me a long story about journals");
  await ann.page.click("#reply-send");
  const writing = () => [...document.querySelectorAll('.msg[data-role="assistant"] .body')].some((b) => b.textContent === "part1")
    && document.querySelector("#run-status").textContent.startsWith("running");
  await until(ann.page, writing);
  await ann.page.reload();
  await until(ann.page, () => document.querySelector("#conn-status").textContent === "live");
  await until(ann.page, writing);
  out.annStatusAfterReload = await ann.page.$eval("#run-status", (e) => e.textContent);
  out.released = (await fetch(release, { method: "POST" })).status;
  await until(ann.page, () => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 1
    && document.querySelector("#run-status").textContent.startsWith("finished"));
  await until(ben.page, () => document.querySelector("#run-status").textContent.startsWith("finished")
    && document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 2);
  const lastText = (page) => page.$$eval('.msg[data-role="assistant"] .body', (m) => m.map((x) => x.textContent));
  out.annMessagesAfterReload = await lastText(ann.page);
  out.benMessages = await lastText(ben.page);
  out.annGapNotices = await ann.page.$$eval(".notice.gap", (n) => n.length);
  const seqs = (await timeline(ann.page)).map(([s]) => s);
  out.annSeqsAfterReload = seqs;
  if (shots) await ann.page.screenshot({ path: `${shots}/inspector-thread.png`, fullPage: true });

  // An agent that writes script — in text, reasoning, tool calls, state,
  // activity, a subagent, an interrupt — and a person who writes it in a
  // note and a tag: shown as text, never run.
  const payload = '<img src=x onerror="window.__pwned=4"><script>window.__pwned=5</script>';
  await ann.page.selectOption("#agent-select", "xss");
  await ann.page.fill("#run-thread", "x-1");
  await ann.page.fill("#run-message", '<img src=x onerror="window.__pwned=3">');
  await ann.page.click("#run-start");
  await until(ann.page, () => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 1
    && document.querySelector("#thread-title").textContent === "x-1");
  await ann.page.waitForSelector('.interrupt[data-interrupt="x-int"]', { timeout: WAIT });
  await ann.page.fill("#note-text", payload);
  await ann.page.click("#note-send");
  await ann.page.fill("#tags-text", payload);
  await ann.page.click("#tags-send");
  await ann.page.waitForSelector('.meta-item[data-meta-type="tags"]', { timeout: WAIT });
  await ann.page.waitForSelector('.meta-item[data-meta-type="note"]', { timeout: WAIT });
  out.pwned = await ann.page.evaluate(() => window.__pwned ?? null);
  out.imagesInPage = await ann.page.$$eval("img", (i) => i.length);
  out.scriptsInPage = await ann.page.$$eval("script", (s) => s.map((x) => x.getAttribute("src")));
  const text = (selector) => ann.page.$eval(selector, (e) => e.textContent);
  out.xssText = await text("#conversation");
  out.xssReasoning = await text("#conversation details.reasoning");
  out.xssActivity = await text('#conversation .activity[data-activity="xa"]');
  out.xssSubagent = await text('#conversation .subagent[data-subagent="xs"]');
  out.xssInterrupt = await text("#interrupts");
  out.xssInterruptComment = await ann.page.$eval('.interrupt [data-field="comment"]', (e) => e.value);
  out.xssMeta = await text("#meta-list");
  out.errors = [...ann.errors, ...ben.errors];
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
  // What Ann's page showed then: its run status and timeline rows.
  if (annPage) {
    out.annStatusAtFailure = await annPage.$eval("#run-status", (e) => e.textContent).catch(String);
    out.annRowsAtFailure = await timeline(annPage).catch(String);
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
