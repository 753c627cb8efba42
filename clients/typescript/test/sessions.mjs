// Two connections on one thread: each sees every seq once, in order, and the
// same events; a run started on one is seen live on the other.
// usage: node sessions.mjs <base> <token> <agent>
import { connect, main, record, userMessage } from './util.mjs';

const [base, token, agent] = process.argv.slice(2);
const thread = `two-${Date.now()}`;

main(async (out) => {
  const a = connect(base, token);
  const b = connect(base, token);
  await Promise.all([a.connect(), b.connect()]);
  const sa = a.session(thread);
  const sb = b.session(thread);
  const seenA = record(sa);
  const seenB = record(sb);
  // A creates the thread with a run (the run subscribes it live).
  let ended = sa.runEnded('r1');
  await sa.run({ agent, runId: 'r1', messages: [userMessage('m1', 'hello')] });
  await ended;
  // B joins: a snapshot of run 1, then live.
  await sb.subscribe();
  out.bJoinedAt = sb.seq;
  // B starts a run: A sees it live. Then A starts one: B sees it live.
  ended = Promise.all([sa.runEnded('r2'), sb.runEnded('r2')]);
  await sb.run({ agent, runId: 'r2', messages: [userMessage('m2', 'from b')] });
  await ended;
  ended = Promise.all([sa.runEnded('r3'), sb.runEnded('r3')]);
  await sa.run({ agent, runId: 'r3', messages: [userMessage('m3', 'from a')] });
  await ended;
  // A session that remembers more than the journal holds (a store restored
  // from an older backup looks like this): the gateway answers `after` with
  // a reset snapshot, and the session starts over from it.
  const c = connect(base, token);
  await c.connect();
  const sc = c.session(thread);
  sc.seq = sa.seq + 1000;
  const reset = new Promise((resolve) => sc.on('reset', resolve));
  await sc.subscribe();
  const r = await reset;
  out.reset = { previousSeq: r.previousSeq, snapshotSeq: r.snapshot.seq, seqAfter: sc.seq, run: sc.latestRun };
  c.close();
  out.a = seenA;
  out.b = seenB;
  out.aSeq = sa.seq;
  out.bSeq = sb.seq;
  out.aRun = sa.latestRun;
  out.bRun = sb.latestRun;
  a.close();
  b.close();
});
