// The React hooks in headless Chromium with current React: test/app.jsx
// bundled (esbuild: React, react-dom, the hooks, @agui-gateway/client and
// @ag-ui/client) into a page served from loopback by this script — an app
// on another origin than the gateway, as most are (the gateway's CORS
// allows it) — driven against a real gateway. Prints what the page
// saw as one JSON object; the assertions are in tests/client_react.rs.
// usage: node test/browser.mjs <base> <token> <agent>
import { build } from 'esbuild';
import { createServer } from 'node:http';
import { chromium } from 'playwright-core';

const [base, token, agent] = process.argv.slice(2);
const out = {};
const bundle = await build({
  entryPoints: [new URL('./app.jsx', import.meta.url).pathname],
  bundle: true,
  write: false,
  format: 'esm',
  platform: 'browser',
  jsx: 'automatic',
  define: { 'process.env.NODE_ENV': '"development"' },
  logLevel: 'error',
});
const script = bundle.outputFiles[0].text.replaceAll('</script', '<\\/script');
let server;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: (process.env.CHROMIUM_ARGS ?? '--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync').split(' '),
});
try {
  const page = await (await browser.newContext()).newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  // A real loopback server (a page fulfilled by playwright counts as a
  // public origin, and Chromium's local-network checks block its sockets).
  const html = `<!doctype html><meta charset="utf-8"><div id="root-a"></div><div id="root-b"></div><div id="root-c"></div><script type="module">${script}</script>`;
  server = createServer((_req, res) => { res.setHeader('content-type', 'text/html'); res.end(html); });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}/?${new URLSearchParams({ token, agent, gateway: base })}`;
  await page.goto(url);
  await page.waitForFunction(() => typeof window.__run === 'function');
  // Bounded: a hang reports how far the page got instead of timing out mute.
  const ran = page.evaluate(() => window.__run());
  const stuck = new Promise((resolve) => { setTimeout(resolve, 60_000, 'stuck').unref(); });
  const result = await Promise.race([ran, stuck]);
  if (result === 'stuck') throw new Error(`the page got stuck: ${JSON.stringify(await page.evaluate(() => window.__progress()))} ${JSON.stringify(errors.slice(0, 5))}`);
  Object.assign(out, result);
  // Sockets the gateway holds authenticated now: one per mounted
  // useGatewayConnection (StrictMode mounts each twice; none may leak).
  const metrics = await (await fetch(`${base}/metrics`)).text();
  out.wsSessions = Number(/^\w*ws_sessions\s+(\d+)/m.exec(metrics)?.[1]);
  out.reactVersion = (await import('react')).version;
  out.errors = errors;
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
  server?.close();
}
console.log(JSON.stringify(out));
