// A token that expires during a long run is refreshed on the open socket:
// no close, no reconnect, every event once.
// usage: node refresh.mjs <base> <secret> <gated agent> <release url> <quick agent>
import { connect, main, mint, record, userMessage } from './util.mjs';

const [base, secret, agent, release, quick] = process.argv.slice(2);
const LIFETIME_S = 4;

main(async (out) => {
  const asked = [];
  const provider = ({ reason }) => {
    asked.push(reason);
    return mint(secret, { sub: 'rita', exp: Math.floor(Date.now() / 1000) + LIFETIME_S });
  };
  const conn = connect(base, provider);
  const closes = [];
  const refreshed = [];
  conn.on('close', (c) => closes.push(c));
  conn.on('token', () => refreshed.push(Date.now()));
  let opens = 0;
  conn.on('open', () => { opens += 1; });
  await conn.connect();
  const firstExpiry = JSON.parse(Buffer.from(conn.token.split('.')[1], 'base64url')).exp * 1000;
  const session = conn.session(`refresh-${Date.now()}`);
  const seen = record(session);
  const firstDelta = new Promise((resolve) => session.on('event', ({ event }) => { if (event.type === 'TEXT_MESSAGE_CONTENT') resolve(); }));
  const ended = session.runEnded('long-run');
  await session.run({ agent, runId: 'long-run', messages: [userMessage('l-m1', 'go')] });
  await firstDelta;
  // The run outlives the first token: wait for that token's expiry (a
  // deadline, not an event) and a second past it, then let the run finish.
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, firstExpiry + 1000 - Date.now())));
  out.released = (await fetch(release, { method: 'POST' })).status;
  await ended;
  out.asked = asked;
  out.refreshes = refreshed.length;
  out.closes = [...closes];
  out.opens = opens;
  out.pastFirstExpiryMs = Date.now() - firstExpiry;
  Object.assign(out, seen);
  conn.close();

  // Without refreshing ahead, the gateway closes the socket at expiry (4001):
  // the provider is asked again ('rejected') and the session resumes after
  // its last seq on the new socket.
  const asked2 = [];
  const late = connect(base, ({ reason }) => {
    asked2.push(reason);
    return mint(secret, { sub: 'rita', exp: Math.floor(Date.now() / 1000) + 2 });
  }, { autoRefresh: false, reconnect: { initialDelayMs: 50, maxDelayMs: 200 } });
  const closes2 = [];
  late.on('close', (c) => closes2.push(c.code));
  await late.connect();
  const again = late.session(session.threadId);
  const seen2 = record(again);
  await again.subscribe();
  const seqAtExpiry = again.seq;
  const reopened = new Promise((resolve) => late.on('open', resolve));
  await reopened;
  await again.whenReady();
  const ended2 = again.runEnded('after-expiry');
  await again.run({ agent: quick, runId: 'after-expiry', messages: [userMessage('l-m2', 'again')] });
  await ended2;
  out.expiry = { asked: asked2, closes: closes2, seqAtExpiry, ...seen2 };
  late.close();
});
