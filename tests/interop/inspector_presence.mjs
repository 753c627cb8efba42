// Two people in the inspector, each in a browser of their own: Ben opens a
// link to a thread nobody has run on yet (the URL names it) and waits; Ann
// starts its first run from her page. Ben sees the run live, both see both
// avatars; Ann types a reply and Ben's page says she is typing until she
// clears it; then Ann's browser process is killed and Ben's page sees her
// leave. Prints one JSON object; tests/inspector.rs asserts on it. Every
// wait is for the page's DOM.
//
// usage: node inspector_presence.mjs <ben's base url> <ann's base url> <thread>
import { chromium } from "playwright-core";

const [benBase, annBase, thread] = process.argv.slice(2);
const launch = () => chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 30_000;
const out = { errors: [] };
const browsers = [];

async function person(name, base, killable = false) {
  // A browser whose process the script holds (to kill it), or a plain one.
  const server = killable ? await chromium.launchServer({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] }) : null;
  const browser = server ? await chromium.connect(server.wsEndpoint()) : await launch();
  browsers.push(browser);
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  page.on("pageerror", (e) => out.errors.push(`${name}: ${e}`));
  await page.goto(`${base}/inspector/`);
  await page.waitForSelector("#dev-mint:not([hidden])", { timeout: WAIT });
  await page.fill("#dev-sub", name);
  await page.click("#dev-mint-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  return { browser, page, server };
}

/** Waits until `page` shows exactly the avatars of `users`. */
async function avatars(page, users) {
  await page.waitForFunction((want) => {
    const got = [...document.querySelectorAll("#presence .avatar")].map((a) => a.dataset.user).sort();
    return JSON.stringify(got) === JSON.stringify(want);
  }, users, { timeout: WAIT });
  return page.$$eval("#presence .avatar", (a) => a.map((x) => ({ user: x.dataset.user, text: x.textContent, me: x.classList.contains("me") })));
}

try {
  const ben = await person("ben", benBase);
  // A link to the thread: the page opens it (nobody has run on it yet).
  await ben.page.goto(`${benBase}/inspector/#thread=${thread}`);
  await ben.page.reload();
  await ben.page.waitForFunction((t) => document.querySelector("#thread-title").textContent === t, thread, { timeout: WAIT });
  out.benAlone = await avatars(ben.page, ["ben"]);

  const ann = await person("ann", annBase, true);
  await ann.page.selectOption("#agent-select", "demo");
  await ann.page.fill("#run-thread", thread);
  await ann.page.fill("#run-message", "hello from ann");
  await ann.page.click("#run-start");
  out.annUrl = await ann.page.evaluate(() => location.hash);
  // Ben, who was there before the first run, sees it live.
  await ben.page.waitForFunction(() => document.querySelector("#run-status").textContent.startsWith("finished"), null, { timeout: WAIT });
  out.benMessages = await ben.page.$$eval("#conversation .msg", (m) => m.map((x) => x.dataset.role));
  // Who did what: the run list says who started the run.
  await ben.page.waitForSelector("#runs .run-by", { timeout: WAIT });
  out.benRunBy = await ben.page.$eval("#runs .run-by", (e) => e.textContent.trim());
  out.benAvatars = await avatars(ben.page, ["ann", "ben"]);
  out.annAvatars = await avatars(ann.page, ["ann", "ben"]);

  // Ann types a reply: Ben's page says so; she clears it: it stops saying so.
  await ann.page.fill("#reply-message", "let me think");
  await ben.page.waitForFunction(() => document.querySelector("#typing").textContent.includes("typing"), null, { timeout: WAIT });
  out.benTypingNote = await ben.page.$eval("#typing", (e) => e.textContent);
  out.annTypingAvatar = await ben.page.$eval('#presence .avatar[data-user="ann"]', (a) => a.classList.contains("typing"));
  await ann.page.fill("#reply-message", "");
  await ben.page.waitForFunction(() => document.querySelector("#typing").textContent === "", null, { timeout: WAIT });

  // Ann's browser dies without a word.
  ann.server.process().kill("SIGKILL");
  out.benAfterKill = await avatars(ben.page, ["ben"]);
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  for (const b of browsers) await b.close().catch(() => {});
}
console.log(JSON.stringify(out));
