// A pasted token about to expire, in the inspector: the page counts down and
// takes a replacement that it sends as an `auth` frame on the open
// connection — no reconnect, and the gateway keeps the connection past the
// old token's expiry. A second page that lets its token expire is closed by
// the gateway and reconnects once given a new one. Errors read plainly: a
// token for someone else is refused as "Not allowed", a second thumbs-up
// within the policy's one-a-minute as "Too many requests … try again in N s".
//
// usage: node inspector_token.mjs <base url> <short token> <short token 2> <replacement> <someone else's token>
import { chromium } from "playwright-core";

const [base, short, short2, replacement, stranger] = process.argv.slice(2);
const WAIT = 20_000;
const out = {};
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const expOf = (t) => JSON.parse(Buffer.from(t.split(".")[1], "base64url").toString()).exp * 1000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function signedIn(token) {
  const page = await (await browser.newContext()).newPage();
  const seen = { sockets: 0, errors: [] };
  page.on("websocket", () => { seen.sockets += 1; });
  page.on("pageerror", (e) => seen.errors.push(String(e)));
  await page.goto(`${base}/inspector/`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  return { page, seen };
}
const text = (page, selector) => page.$eval(selector, (e) => e.textContent);

try {
  const [a, b] = await Promise.all([signedIn(short), signedIn(short2)]);

  // A: the countdown is there from the start (less than five minutes left) and ticks.
  out.countdownVisible = await a.page.$eval("#token-expiry", (e) => !e.hidden);
  out.countdown1 = await text(a.page, "#token-countdown");
  await sleep(1_100);
  out.countdown2 = await text(a.page, "#token-countdown");

  // Someone else's token is refused, said plainly; the connection stays.
  await a.page.fill("#token-replace", stranger);
  await a.page.click("#token-replace-send");
  await a.page.waitForFunction(() => document.querySelector("#token-status").textContent !== "", null, { timeout: WAIT });
  out.strangerRefused = await text(a.page, "#token-status");

  // The right replacement: taken on the open connection.
  await a.page.fill("#token-replace", replacement);
  await a.page.click("#token-replace-send");
  await a.page.waitForFunction(() => document.querySelector("#token-expiry").hidden, null, { timeout: WAIT });
  out.storedToken = (await a.page.evaluate(() => sessionStorage.getItem("agui-inspector.token"))) === replacement;

  // Past the old token's expiry: A is still on its first connection and it works.
  await sleep(Math.max(0, expOf(short) + 1_500 - Date.now()));
  out.liveAfterExpiry = (await text(a.page, "#conn-status")) === "live";
  await a.page.selectOption("#agent-select", "demo");
  await a.page.fill("#run-thread", "tok-1");
  await a.page.fill("#run-message", "still there?");
  await a.page.click("#run-start");
  await a.page.waitForFunction(() => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 1, null, { timeout: WAIT });
  out.runAfterExpiry = await text(a.page, "#run-status");
  out.socketsA = a.seen.sockets;

  // Policy allows one meta event a minute: the second is refused, readably.
  await a.page.click("#thumbs-up");
  await a.page.waitForSelector('.meta-item[data-meta-type="thumbs_up"]', { timeout: WAIT });
  await a.page.click("#thumbs-up");
  await a.page.waitForSelector("#notices .notice.error", { timeout: WAIT });
  out.rateLimited = await text(a.page, "#notices .notice.error");

  // B let its token expire: the gateway closed the connection, the page
  // says so and takes a new token to reconnect.
  await b.page.waitForFunction(() => document.querySelector("#conn-status").textContent !== "live", null, { timeout: WAIT });
  out.expiredNotice = await text(b.page, "#token-countdown");
  await b.page.fill("#token-replace", replacement);
  await b.page.click("#token-replace-send");
  await b.page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  out.socketsB = b.seen.sockets;
  out.errors = [...a.seen.errors, ...b.seen.errors];
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
