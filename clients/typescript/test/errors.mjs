// Every error code of the contract reaches the caller as a GatewayError with
// that code (all but `internal`, which no client input can provoke).
// usage: node errors.mjs <base> <secret> <agent> <gated agent> <release url> <gateway pid>
import { GatewayError } from '../src/index.js';
import { connect, main, mint, userMessage } from './util.mjs';

const [base, secret, agent, gated, release, pid] = process.argv.slice(2);

/** The code `promise` rejects with (and that it is a GatewayError). */
async function codeOf(promise) {
  try {
    await promise;
    return 'no error';
  } catch (e) {
    return e instanceof GatewayError ? e.code : `not a GatewayError: ${e}`;
  }
}

main(async (out) => {
  const owner = connect(base, mint(secret, { sub: 'owen' }));
  await owner.connect();
  const thread = `errors-${Date.now()}`;
  const own = owner.session(thread);
  const ended = own.runEnded('e1');
  await own.run({ agent, runId: 'e1', messages: [userMessage('e-m1', 'hi')] });
  await ended;
  const codes = {};
  codes.invalid = await codeOf(own.run({ agent, runId: 'bad-messages', messages: 'not a list' }));
  codes.conflict = await codeOf(own.run({ agent, runId: 'e1', messages: [userMessage('e-m2', 'again')] }));
  codes.not_found = await codeOf(owner.session(`${thread}-missing`).subscribe());
  codes.too_large = await codeOf(own.meta('note', { text: 'x'.repeat(64 * 1024) }));
  // Another user who may only view the thread.
  const viewer = connect(base, mint(secret, { sub: 'vera', threads: { [thread]: ['view'] } }));
  await viewer.connect();
  codes.forbidden = await codeOf(viewer.session(thread).run({ agent, messages: [userMessage('e-m3', 'may I?')] }));
  // A refresh with a token that does not verify.
  codes.unauthenticated = await codeOf(owner.authenticate(`${mint('not-the-secret', { sub: 'owen' })}`));
  // The connection itself, refused its token: no retry with the same one.
  const refused = connect(base, mint('not-the-secret', { sub: 'owen' }));
  codes.connectRefused = await codeOf(refused.connect());
  out.refusedState = refused.state;
  // One meta a minute (the policy's rate rule).
  await own.meta('note', { text: 'one' });
  codes.rate_limited = await codeOf(own.meta('note', { text: 'two' }));
  // A draining node refuses new runs: a gated run keeps the node draining.
  const other = owner.session(`${thread}-gated`);
  const otherHolding = new Promise((resolve) => other.on('event', ({ event }) => { if (event.type === 'TEXT_MESSAGE_CONTENT') resolve(); }));
  await other.run({ agent: gated, runId: 'hold', messages: [userMessage('e-m4', 'hold')] });
  await otherHolding;
  process.kill(Number(pid), 'SIGTERM');
  // /readyz answers 503 once the node drains: the typed error of an HTTP call.
  for (;;) {
    const code = await codeOf(owner.request('/readyz'));
    if (code === 'unavailable') { codes.unavailableHttp = code; break; }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  codes.unavailable = await codeOf(owner.session(`${thread}-late`).run({ agent, messages: [userMessage('e-m5', 'late')] }));
  await fetch(release, { method: 'POST' });
  out.codes = codes;
  owner.close();
  viewer.close();
});
