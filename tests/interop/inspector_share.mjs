// Two people try the inspector together on a development gateway: each
// mints a token with the page's own form (no token pasted, no grant
// configured). Ben's page is open first; Ann asks the demo agent for a
// transfer on a new thread. Without a click, Ben's thread list shows it, and
// both lists follow its status; Ben opens it and approves; both see the
// answer in the conversation. Prints one JSON object; tests/inspector.rs
// asserts on it. Every wait is for the page's DOM.
//
// usage: node inspector_share.mjs <base url> <thread>
import { chromium } from "playwright-core";

const [base, thread] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 30_000;
const out = { errors: [] };

async function person(name) {
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  page.on("pageerror", (e) => out.errors.push(`${name}: ${e}`));
  await page.goto(`${base}/inspector/`);
  await page.waitForSelector("#dev-mint:not([hidden])", { timeout: WAIT });
  await page.fill("#dev-sub", name);
  await page.click("#dev-mint-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  return page;
}

/** Waits until `page`'s list item for the thread says `status`; returns its text. */
async function listed(page, status) {
  await page.waitForFunction(([t, s]) => {
    const item = document.querySelector(`.thread-item[data-thread="${t}"] small`);
    return item && item.textContent.includes(` · ${s} · `);
  }, [thread, status], { timeout: WAIT });
  return page.$eval(`.thread-item[data-thread="${thread}"] small`, (e) => e.textContent);
}

const answers = (page) => page.$$eval("#conversation .answer", (a) => a.map((x) => ({ status: x.dataset.status, text: x.textContent })));

try {
  const ben = await person("ben");
  const ann = await person("ann");
  await ann.selectOption("#agent-select", "demo");
  await ann.fill("#run-thread", thread);
  await ann.fill("#run-message", "please transfer 25 EUR to bob");
  await ann.click("#run-start");
  await ann.waitForSelector(".interrupt .approve", { timeout: WAIT });

  // Nobody clicked ↻: both lists show the thread waiting for approval.
  out.annListed = await listed(ann, "interrupted");
  out.benListed = await listed(ben, "interrupted");

  await ben.click(`.thread-item[data-thread="${thread}"]`);
  await ben.waitForSelector(".interrupt .approve", { timeout: WAIT });
  const field = (name) => ben.$eval(`.interrupt [data-field="${name}"]`, (e) => e.value);
  out.benProposed = { amount: await field("amount"), to: await field("to") };
  await ben.fill('.interrupt [data-field="amount"]', "30");
  await ben.click(".interrupt .approve");

  // The answer, where the question was, for both of them.
  for (const [name, page] of [["ann", ann], ["ben", ben]]) {
    await page.waitForSelector("#conversation .answer", { timeout: WAIT });
    await page.waitForFunction(() => document.querySelector("#run-status").textContent.startsWith("finished"), null, { timeout: WAIT });
    out[`${name}Answers`] = await answers(page);
    out[`${name}Interrupts`] = await page.$$eval("#interrupts .interrupt", (i) => i.length);
  }
  out.annReply = (await ann.$$eval('.msg[data-role="assistant"] .body', (m) => m.map((x) => x.textContent))).pop();
  out.annListedAfter = await listed(ann, "finished");
  out.benListedAfter = await listed(ben, "finished");
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
