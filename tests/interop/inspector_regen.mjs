// Regenerate after an approval, from the page: Ann asks the demo agent for
// a transfer, Ben approves it, then Ben regenerates the answer that
// followed. The regenerate is a sibling of the approval's run carrying the
// same answer (no "pending interrupts" refusal); both pages end on it.
// The regenerate button is hidden where the gateway would refuse it: on
// the answer while its run is still writing it (`hiddenWhileRunning`), and
// shown on every assistant message once the runs ended (`regenerable`).
// Prints one JSON object; tests/inspector.rs asserts on it.
//
// usage: node inspector_regen.mjs <base url> <base url 2> <thread>
import { chromium } from "playwright-core";

const [base, base2, thread] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 30_000;
// For the regenerate button's state: short, so a page that never marks it
// fails with the flags printed rather than the whole script timing out.
const FLAG_WAIT = 8_000;
const out = { errors: [] };

async function person(name, at) {
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  page.on("pageerror", (e) => out.errors.push(`${name}: ${e}`));
  await page.goto(`${at}/inspector/`);
  await page.waitForSelector("#dev-mint:not([hidden])", { timeout: WAIT });
  await page.fill("#dev-sub", name);
  await page.click("#dev-mint-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  return page;
}

const heads = (page) => page.$$eval("#runs .run-item", (i) => i.map((x) => ({ run: x.dataset.run, parent: x.dataset.parent, kind: x.dataset.kind, text: x.textContent })));

try {
  const ann = await person("ann", base);
  const ben = await person("ben", base2);
  await ann.selectOption("#agent-select", "demo");
  await ann.fill("#run-thread", thread);
  await ann.fill("#run-message", "please transfer 25 EUR to bob");
  await ann.click("#run-start");
  await ann.waitForSelector(".interrupt .approve", { timeout: WAIT });
  await ben.click("#threads-refresh");
  await ben.click(`.thread-item[data-thread="${thread}"]`, { timeout: WAIT });
  await ben.waitForSelector(".interrupt .approve", { timeout: WAIT });
  // Recorded by the page itself, from here on: an assistant message added
  // after the approval that was marked not regenerable (its button hidden)
  // at any moment. Polling from outside missed it when a loaded machine
  // let the page handle the whole run in one go (the mark lasted less
  // than a poll); the page's own mutation records see every change.
  await ben.evaluate(() => {
    window.hiddenWhileRunning = false;
    const added = new Set();
    const hidden = (el) => el.dataset.regenerable === "no" && el.querySelector(":scope > .msg-action.regenerate")?.hidden === true;
    new MutationObserver((records) => {
      for (const r of records) {
        for (const node of r.addedNodes) {
          if (node.nodeType !== 1) continue;
          const found = node.matches('.msg[data-role="assistant"]') ? [node] : [...node.querySelectorAll('.msg[data-role="assistant"]')];
          for (const el of found) {
            added.add(el);
            if (hidden(el)) window.hiddenWhileRunning = true;
          }
        }
        if (r.type === "attributes" && added.has(r.target) && (r.oldValue === "no" || hidden(r.target))) {
          window.hiddenWhileRunning = true;
        }
      }
    }).observe(document.querySelector("#conversation"), {
      subtree: true,
      childList: true,
      attributes: true,
      attributeOldValue: true,
      attributeFilter: ["data-regenerable"],
    });
  });
  await ben.click(".interrupt .approve");
  await ben.waitForFunction(() => document.querySelector("#run-status").textContent.startsWith("finished"), null, { timeout: WAIT });
  await ben.waitForFunction(() => document.querySelectorAll("#runs .run-item").length === 2, null, { timeout: WAIT });
  out.hiddenWhileRunning = await ben.evaluate(() => window.hiddenWhileRunning);
  const flags = (page) => page.$$eval('#conversation .msg[data-role="assistant"]', (m) => m.map((x) => x.dataset.regenerable ?? null));
  await ben.waitForFunction(() => [...document.querySelectorAll('#conversation .msg[data-role="assistant"]')].every((m) => m.dataset.regenerable === "yes"), null, { timeout: FLAG_WAIT }).catch(() => {});
  out.regenerable = { ben: await flags(ben) };
  // Regenerate the answer the approval led to.
  await ben.click('#conversation .msg[data-role="assistant"]:last-of-type .msg-action.regenerate');
  for (const page of [ann, ben]) {
    await page.waitForFunction(() => document.querySelectorAll("#runs .run-item").length === 3
      && document.querySelector("#runs .run-item.head")?.textContent.includes("finished"), null, { timeout: WAIT });
  }
  out.benRuns = await heads(ben);
  for (const page of [ann, ben]) {
    await page.waitForFunction(() => [...document.querySelectorAll('#conversation .msg[data-role="assistant"]')].every((m) => m.dataset.regenerable === "yes"), null, { timeout: FLAG_WAIT }).catch(() => {});
  }
  out.regenerable.annAfter = await flags(ann);
  out.regenerable.benAfter = await flags(ben);
  out.annRuns = await heads(ann);
  out.benNotices = await ben.$$eval("#notices .notice.error", (n) => n.map((x) => x.textContent));
  out.benReply = (await ben.$$eval('#conversation .msg[data-role="assistant"] .body', (m) => m.map((x) => x.textContent))).pop();
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
