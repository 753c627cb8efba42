// Presence through the package: a session lists who watches its thread
// (`viewers()`, from the subscribe ack on) and emits `presence` when
// someone joins or leaves — here a second person whose connection closes —
// and who is typing (`session.composing()`, throttled by the package).
// usage: node presence.mjs <base> <token A> <token B>
import { connect, main } from './util.mjs';

const [base, tokenA, tokenB] = process.argv.slice(2);
const threadId = `team-7-presence-${Date.now()}`;
const ids = (list) => list.map((w) => w.userId).sort();

/** The next `presence` event of `session` after which `viewers()` lists `want`. */
function until(session, want) {
  return new Promise((resolve) => {
    const check = () => {
      if (JSON.stringify(ids(session.viewers())) === JSON.stringify(want)) { stop(); resolve(); }
    };
    const stop = session.on('presence', check);
    check();
  });
}

main(async (out) => {
  const a = connect(base, tokenA);
  await a.connect();
  const sa = a.session(threadId);
  const events = [];
  sa.on('presence', ({ joined, left }) => {
    if (joined.length || left.length) events.push({ joined: ids(joined), left: left.map((l) => l.userId) });
  });
  await sa.subscribe();
  out.atJoin = ids(sa.viewers());
  const b = connect(base, tokenB);
  await b.connect();
  const sb = b.session(threadId);
  await sb.subscribe();
  await until(sa, ['ann', 'ben']);
  await until(sb, ['ann', 'ben']);
  out.bothA = sa.viewers().map((w) => ({ userId: w.userId, name: w.name ?? null, connections: w.connections }));
  // Ben types: Ann is told; a repeat at once sends nothing; he stops.
  const typing = (want) => new Promise((resolve) => {
    const stop = sa.on('presence', ({ composing }) => {
      if (JSON.stringify(composing) === JSON.stringify(want)) { stop(); resolve(); }
    });
  });
  const started = typing(['ben']);
  const ack = await sb.composing();
  out.lapseMs = ack.lapseMs;
  out.repeat = await sb.composing();
  await started;
  out.benTyping = sa.viewers().find((w) => w.userId === 'ben').composing === true;
  const stopped = typing([]);
  await sb.composing(false);
  await stopped;
  b.close();
  await until(sa, ['ann']);
  out.events = events;
  a.close();
});
