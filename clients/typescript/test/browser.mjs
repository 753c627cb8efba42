// The package as a browser module in headless Chromium (the inspector tests'
// way): the gateway serves it next to the inspector; two sessions on one
// thread see identical gapless seqs, and each sees the other's run live.
// usage: node browser.mjs <base> <token> <agent>
import { chromium } from 'playwright-core';

const [base, token, agent] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
const out = {};
try {
  const page = await (await browser.newContext()).newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${base}/inspector/`);
  Object.assign(out, await page.evaluate(async ({ token, agent }) => {
    // The browser's own WebSocket: nothing injected.
    const { GatewayConnection } = await import('/inspector/agui-gateway-client.js');
    const thread = `browser-${Date.now()}`;
    const record = (session) => {
      const seen = { seqs: [], types: [], snapshots: [] };
      session.on('snapshot', (s) => seen.snapshots.push(s.seq));
      session.on('event', ({ seq, event }) => { seen.seqs.push(seq); seen.types.push(event.type); });
      return seen;
    };
    const a = new GatewayConnection({ url: location.origin, token });
    const b = new GatewayConnection({ url: location.origin, token });
    await Promise.all([a.connect(), b.connect()]);
    const sa = a.session(thread);
    const sb = b.session(thread);
    const seenA = record(sa);
    const seenB = record(sb);
    let ended = sa.runEnded('b1');
    await sa.run({ agent, runId: 'b1', messages: [{ id: 'bm1', role: 'user', content: 'hello' }] });
    await ended;
    await sb.subscribe();
    const joinedAt = sb.seq;
    ended = Promise.all([sa.runEnded('b2'), sb.runEnded('b2')]);
    await sb.run({ agent, runId: 'b2', messages: [{ id: 'bm2', role: 'user', content: 'from b' }] });
    await ended;
    ended = Promise.all([sa.runEnded('b3'), sb.runEnded('b3')]);
    await sa.run({ agent, runId: 'b3', messages: [{ id: 'bm3', role: 'user', content: 'from a' }] });
    await ended;
    a.close();
    b.close();
    return { a: seenA, b: seenB, joinedAt, nativeWebSocket: typeof WebSocket === 'function' };
  }, { token, agent }));
  out.errors = errors;
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
