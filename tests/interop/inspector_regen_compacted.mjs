// Regenerate after an approval whose answers the journal no longer holds
// (compacted away): the page cannot know that from the run tree, so it
// offers the button, and the gateway's refusal reaches the person as an
// accurate notice (what happened and what to do), with no run started.
// Prints one JSON object; tests/inspector.rs asserts on it.
//
// usage: node inspector_regen_compacted.mjs <base url> <token> <thread>
import { chromium } from "playwright-core";

const [base, token, thread] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 30_000;
const out = { errors: [] };

try {
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  page.on("pageerror", (e) => out.errors.push(String(e)));
  await page.goto(`${base}/inspector/`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  await page.goto(`${base}/inspector/#thread=${thread}`);
  await page.reload();
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  const answer = '#conversation .msg[data-role="assistant"]:last-of-type';
  await page.waitForSelector(`${answer}[data-regenerable="yes"]`, { timeout: WAIT });
  out.answer = await page.$eval(`${answer} .body`, (b) => b.textContent);
  out.runsBefore = await page.$$eval("#runs .run-item", (i) => i.length);
  await page.click(`${answer} .msg-action.regenerate`);
  await page.waitForSelector("#notices .notice.error", { timeout: WAIT });
  out.notices = await page.$$eval("#notices .notice.error", (n) => n.map((x) => x.textContent));
  out.runsAfter = await page.$$eval("#runs .run-item", (i) => i.length);
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
