// The inspector across a gateway restart: a person watches a thread; the
// gateway goes away and comes back (the test restarts it on the same port);
// the page reconnects by itself, resumes after the last seq it had, and
// shows the next run without a gap or a repeat.
//
// usage: node inspector_reconnect.mjs <base url> <token> <thread>
// Prints "watching" once it shows the thread, "reconnected" once live
// again, then one JSON object when it has seen the next run finish.
import { chromium } from "playwright-core";

const [base, token, thread] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const out = {};
const WAIT = 60_000;
try {
  const page = await (await browser.newContext()).newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${base}/inspector/`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  await page.click("#threads-refresh");
  await page.click(`.thread-item[data-thread="${thread}"]`, { timeout: WAIT });
  await page.waitForSelector('.tl-row[data-type="snapshot"]', { timeout: WAIT });
  console.log("watching");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent !== "live", null, { timeout: WAIT });
  out.sawOutage = true;
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  console.log("reconnected");
  await page.waitForFunction(() => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 1, null, { timeout: WAIT });
  out.rows = await page.$$eval(".tl-row", (rows) => rows.map((r) => [Number(r.dataset.seq), r.dataset.type]));
  out.gaps = await page.$$eval(".notice.gap", (n) => n.map((x) => x.textContent));
  out.errors = errors;
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
