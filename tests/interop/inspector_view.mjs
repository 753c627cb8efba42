// Opens one thread in the inspector as one person and reports what the page
// shows once it has the thread's snapshot: how many reasoning blocks, which
// event types the timeline lists, the conversation's roles.
//
// usage: node inspector_view.mjs <base url> <token> <thread>
import { chromium } from "playwright-core";

const [base, token, thread] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const out = {};
try {
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${base}/inspector/`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: 30_000 });
  await page.click("#threads-refresh");
  await page.click(`.thread-item[data-thread="${thread}"]`, { timeout: 30_000 });
  await page.waitForSelector('.tl-row[data-type="snapshot"]', { timeout: 30_000 });
  out.reasoning = await page.$$eval("details.reasoning", (d) => d.length);
  out.roles = await page.$$eval(".msg", (m) => m.map((x) => x.dataset.role));
  out.conversation = await page.$eval("#conversation", (e) => e.textContent);
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
