// joinStream (the platform's EventSource, reopened with a new ticket and
// `lastEventId=` when it gives up) across a gateway restart.
// usage: node --experimental-eventsource joinstream.mjs <base> <token> <thread>
//   prints "watching" once it saw the first run end; the test then restarts
//   the gateway and runs again; prints the JSON once it saw that run end:
//   every event as [cursor, type, runId], and how often it opened a stream.
import { joinStream } from '../src/index.js';
import { main } from './util.mjs';

const [base, token, thread] = process.argv.slice(2);

main(async (out) => {
  // Node's EventSource waits to reconnect on an unreferenced timer: keep
  // the process alive while the gateway restarts.
  const alive = setInterval(() => {}, 1000);
  const events = [];
  let ended = 0;
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const stream = joinStream({
    base,
    threadId: thread,
    token,
    retryMs: 200,
    onError(e) { console.error('ticket:', String(e)); },
    onEvent(event, cursor) {
      events.push([cursor, event.type, event.runId ?? null]);
      if (event.type !== 'RUN_FINISHED') return;
      ended += 1;
      if (ended === 1) console.log('watching');
      if (ended === 2) done();
    },
  });
  await finished;
  out.events = events;
  out.opens = stream.opens;
  stream.close();
  clearInterval(alive);
});
