// A token that expires during a long run is refreshed on the open socket:
// no close, no reconnect, every event once.
// usage: node refresh.mjs <base> <secret> <agent> <release url>
import { connect, main, mint, record, userMessage } from './util.mjs';

const [base, secret, agent, release] = process.argv.slice(2);
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
});
