// The inspector in a 600 px wide window, as one person who signs in with a
// minted development token: what shows before sign-in, whether the page fits
// the window once a thread is open, and whether the timeline follows new
// events (and stops following once the person scrolls up to read).
// Prints one JSON object; tests/inspector.rs asserts on it.
//
// usage: node inspector_narrow.mjs <base url> [screenshot dir]
import { chromium } from "playwright-core";

const [base, shots] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 30_000;
const out = { errors: [] };

/** How far the timeline's scrolling body is from showing its last row. */
const timeline = (page) => page.$eval("#timeline tbody", (b) => ({
  rows: b.children.length,
  scrollable: b.scrollHeight > b.clientHeight,
  scrollTop: b.scrollTop,
  fromBottom: b.scrollHeight - b.scrollTop - b.clientHeight,
}));

/** Whatever sticks out of the window sideways (none of it may). */
const layout = (page) => page.evaluate(() => {
  const width = document.documentElement.clientWidth;
  const box = (selector) => {
    const r = document.querySelector(selector).getBoundingClientRect();
    return { left: Math.round(r.left), right: Math.round(r.right), top: Math.round(r.top), width: Math.round(r.width) };
  };
  return {
    width,
    scrollWidth: document.documentElement.scrollWidth,
    aside: box("aside .panel"),
    thread: box("#thread"),
    conversation: box("#conversation"),
    timeline: box("#timeline"),
    feedback: box("#thumbs-up"),
  };
});

try {
  const page = await (await browser.newContext({ viewport: { width: 600, height: 800 } })).newPage();
  page.on("pageerror", (e) => out.errors.push(String(e)));
  await page.goto(`${base}/inspector/`);
  await page.waitForSelector("#dev-mint:not([hidden])", { timeout: WAIT });
  // Before sign-in: the sign-in form, and nothing that needs a token.
  out.beforeSignIn = {
    signin: await page.isVisible("#signin"),
    app: await page.isVisible("#app"),
    runStart: await page.isVisible("#run-start"),
    thread: await page.isVisible("#thread"),
  };

  await page.fill("#dev-sub", "nia");
  await page.click("#dev-mint-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  out.afterSignIn = { signin: await page.isVisible("#signin"), app: await page.isVisible("#app") };

  // A run long enough to overflow the timeline's scrolling body.
  await page.selectOption("#agent-select", "demo");
  await page.fill("#run-thread", "narrow-1");
  await page.fill("#run-message", "tell me how a journal with gapless sequence numbers lets late joiners catch up");
  await page.click("#run-start");
  await page.waitForSelector('.tl-row[data-type="RUN_FINISHED"]', { state: "attached", timeout: WAIT });
  out.followed = await timeline(page);
  out.layout = await layout(page);
  if (shots) await page.screenshot({ path: `${shots}/inspector-narrow.png`, fullPage: true });

  // Scrolled up to read: the next run's rows must not yank the view down.
  await page.$eval("#timeline tbody", (b) => { b.scrollTop = 0; });
  await page.fill("#reply-message", "and once more");
  await page.click("#reply-send");
  await page.waitForFunction(() => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 2, null, { timeout: WAIT });
  out.readingUp = await timeline(page);
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
