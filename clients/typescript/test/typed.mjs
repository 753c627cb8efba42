// The session's own view and the promise API, against the demo agent:
// - whoever starts a run sees its answer in `session.messages` (folded live,
//   equal to the gateway's snapshot), through `events()` as well;
// - `run` and `regenerate` resolve to an ack naming the run;
// - regenerating the thread's FIRST run: `latestRun.parentRunId` is null
//   (an explicit null is not "missing"), on the starter and on a watcher;
// - an AbortSignal rejects a call with `aborted` (before and after sending);
// - a command sent while the socket is down waits for the reconnect and is
//   sent then (`retry`).
// The assertions are in tests/clients.rs.
// usage: node typed.mjs <base> <token> <agent>
import { connect, main, userMessage } from './util.mjs';

const [base, token, agent] = process.argv.slice(2);
const threadId = `typed-${Date.now()}`;
const shape = (messages) => messages.map((m) => ({ id: m.id, role: m.role, content: m.content }));

main(async (out) => {
  const conn = connect(base, token, { reconnect: { initialDelayMs: 20, maxDelayMs: 50 } });
  await conn.connect();
  const a = conn.session(threadId);
  const iterated = [];
  const iterating = (async () => {
    for await (const { seq, event } of a.events()) {
      iterated.push([seq, event.type]);
      if (event.type === 'RUN_FINISHED' && event.runId === 'r1') break;
    }
  })();
  let ended = a.runEnded('r1');
  const ack = await a.run({ agent, runId: 'r1', messages: [userMessage('u1', 'hello there')] });
  out.ackRunId = ack.runId;
  await ended;
  await iterating;
  out.iterated = iterated;
  out.seqAfterR1 = a.seq;
  out.messagesAfterR1 = shape(a.messages);
  out.snapshotAfterR1 = shape((await a.fetchSnapshot()).messages);

  // A watcher on a second connection, joined after the first run.
  const conn2 = connect(base, token);
  await conn2.connect();
  const w = conn2.session(threadId);
  await w.subscribe();
  const wEnded = w.runEnded('r2');
  ended = a.runEnded('r2');
  const again = await a.regenerate(undefined, { runId: 'r2' });
  out.regenerateAckRunId = again.runId;
  await Promise.all([ended, wEnded]);
  out.latestRun = a.latestRun;
  out.watcherRun = w.latestRun;
  out.messagesAfterR2 = shape(a.messages);
  out.watcherMessagesAfterR2 = shape(w.messages);
  out.snapshotAfterR2 = shape((await a.fetchSnapshot()).messages);

  // AbortSignal: aborted before the call (nothing sent) and while waiting.
  const before = new AbortController();
  before.abort();
  out.abortedBefore = await a.meta('note', { text: 'never sent' }, 'never', { signal: before.signal }).then(() => 'resolved', (e) => e.code);
  const during = new AbortController();
  const waiting = a.runEnded('no-such-run', { signal: during.signal }).then(() => 'resolved', (e) => e.code);
  during.abort();
  out.abortedWaiting = await waiting;
  const stopIter = new AbortController();
  const it = a.events({ signal: stopIter.signal });
  stopIter.abort();
  out.iteratorAfterAbort = await it.next();

  // Sent while the socket is down: waits for the reconnect, then sent.
  const back = new Promise((resolve) => { const stop = conn.on('open', () => { stop(); resolve(); }); });
  conn.ws.terminate();
  out.stateWhenSent = conn.state;
  const noRetry = await a.meta('note', { text: 'x' }, 'x0').then(() => 'resolved', (e) => e.code);
  out.withoutRetry = noRetry;
  const retried = await a.meta('note', { text: 'after reconnect' }, 'x1', { retry: { attempts: 1 } });
  out.retriedAck = retried.type;
  await back;
  conn.close();
  conn2.close();
});
