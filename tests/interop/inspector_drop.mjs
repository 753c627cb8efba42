// The inspector across a network drop (the gateway keeps running): the page
// reaches the gateway through a TCP relay in this script. Mid-run — while
// the scripted "gated" agent holds its message half-written — the relay
// resets every connection and the browser goes offline, so reconnecting
// fails for a while; the run finishes meanwhile. Back online, the page must
// reconnect by itself and resume after the last seq it had: every seq once,
// no gap, the message whole.
//
// usage: node inspector_drop.mjs <gateway base url> <token> <agent release url>
import { chromium } from "playwright-core";
import net from "node:net";

const [base, token, release] = process.argv.slice(2);
const WAIT = 15_000;
const out = {};

// The relay: every byte both ways, until `cut()` resets it all.
const gateway = new URL(base);
const sockets = new Set();
const relay = net.createServer((client) => {
  const upstream = net.connect(Number(gateway.port), gateway.hostname);
  for (const [a, b] of [[client, upstream], [upstream, client]]) {
    sockets.add(a);
    a.pipe(b);
    a.on("error", () => b.destroy());
    a.on("close", () => { sockets.delete(a); b.destroy(); });
  }
});
await new Promise((resolve) => relay.listen(0, "127.0.0.1", resolve));
const cut = () => { for (const s of sockets) s.resetAndDestroy(); };

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
try {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  // Every WebSocket the page opens, and the subscribe frames it sends.
  out.sockets = 0;
  out.subscribes = [];
  page.on("websocket", (ws) => {
    out.sockets += 1;
    ws.on("framesent", ({ payload }) => {
      const frame = JSON.parse(payload);
      if (frame.type === "subscribe") out.subscribes.push(frame);
    });
  });
  const until = (fn) => page.waitForFunction(fn, null, { timeout: WAIT });

  await page.goto(`http://127.0.0.1:${relay.address().port}/inspector/`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await until(() => document.querySelector("#conn-status").textContent === "live");
  await page.selectOption("#agent-select", "gated");
  await page.fill("#run-thread", "drop-1");
  await page.fill("#run-message", "hold on");
  await page.click("#run-start");
  // The agent waits after "part1": nothing else arrives until released.
  await until(() => document.querySelector('.msg[data-role="assistant"] .body')?.textContent === "part1");
  out.lastSeqBeforeDrop = Math.max(...await page.$$eval(".tl-row", (rows) => rows.map((r) => Number(r.dataset.seq))));

  await context.setOffline(true);
  cut();
  await until(() => document.querySelector("#conn-status").textContent !== "live");
  out.sawOutage = true;
  // The run goes on without the page.
  const released = await fetch(release, { method: "POST" });
  out.released = released.status;
  await new Promise((resolve) => setTimeout(resolve, 1_500)); // reconnect attempts fail meanwhile
  out.liveWhileOffline = await page.$eval("#conn-status", (e) => e.textContent === "live");
  await context.setOffline(false);

  await until(() => document.querySelector("#conn-status").textContent === "live");
  await until(() => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 1);
  out.rows = await page.$$eval(".tl-row", (rows) => rows.map((r) => [Number(r.dataset.seq), r.dataset.type]));
  out.message = await page.$eval('.msg[data-role="assistant"] .body', (e) => e.textContent);
  out.gaps = await page.$$eval(".notice.gap", (n) => n.map((x) => x.textContent));
  out.status = await page.$eval("#run-status", (e) => e.textContent);
  out.errors = errors;
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
  relay.close();
}
console.log(JSON.stringify(out));
process.exit(0);
