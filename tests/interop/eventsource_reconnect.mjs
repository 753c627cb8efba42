// A browser's own EventSource on the SSE join stream, authenticated by a
// stream ticket, across a network drop: the page reaches the gateway through
// a TCP relay in this script. Mid-run — while the scripted "gated" agent
// holds its message half-written — the relay resets every connection; the
// run is then released and finishes while the browser is cut off. The
// EventSource must reconnect by itself (same URL, same ticket, with
// Last-Event-ID) and get every event once.
//
// usage: node eventsource_reconnect.mjs <gateway base url> <thread> <ticket> <agent release url>
// Prints one JSON object: every message event as [lastEventId, data], the
// number of opens and errors the EventSource reported, and its final state.
import { chromium } from "playwright-core";
import net from "node:net";

const [base, thread, ticket, release] = process.argv.slice(2);
const WAIT = 12_000;
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

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await (await browser.newContext()).newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const until = (fn) => page.waitForFunction(fn, null, { timeout: WAIT });
  // Any page of the gateway's origin: the stream is then same-origin.
  await page.goto(`http://127.0.0.1:${relay.address().port}/healthz`);
  await page.evaluate(([thread, ticket]) => {
    window.got = [];
    window.opens = 0;
    window.errors = 0;
    window.es = new EventSource(`/v1/threads/${thread}/events?ticket=${ticket}`);
    window.es.onopen = () => { window.opens += 1; };
    window.es.onerror = () => { window.errors += 1; };
    window.es.onmessage = (e) => { window.got.push([e.lastEventId, e.data]); };
  }, [thread, ticket]);
  // The agent waits after "part1": nothing else arrives until released.
  await until(() => window.got.some(([, d]) => d.includes('"part1"')));
  cut();
  await until(() => window.errors >= 1);
  out.eventsBeforeDrop = await page.evaluate(() => window.got.length);
  out.released = (await fetch(release, { method: "POST" })).status;
  await until(() => window.got.some(([, d]) => JSON.parse(d).type === "RUN_FINISHED"));
  out.events = await page.evaluate(() => window.got);
  out.opens = await page.evaluate(() => window.opens);
  out.errors = await page.evaluate(() => window.errors);
  out.readyState = await page.evaluate(() => window.es.readyState);
  out.pageErrors = errors;
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
  try {
    out.events = await (await browser.contexts()[0].pages()[0]).evaluate(() => [window.got, window.opens, window.errors, window.es.readyState]);
  } catch {}
} finally {
  await browser.close();
  relay.close();
}
console.log(JSON.stringify(out));
process.exit(0);
