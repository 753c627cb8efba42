// A thread joined before its first run, by someone whose token grants
// `view` on it: the README's quick start exactly as written (run as a page
// would: a global WebSocket, `getJwt` and `render` defined), and a
// GatewayAgent that attaches first and folds another person's first run.
// usage: node early.mjs <base> <grantee token> <runner token>
import WebSocket from 'ws';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { GatewayAgent } from '../src/agent.js';
import { connect, main, userMessage } from './util.mjs';

const [base, granteeToken, runnerToken] = process.argv.slice(2);
const here = fileURLToPath(new URL('.', import.meta.url));

/** The first `js` block of the README's "Quick start", as written. */
function quickStart() {
  const readme = readFileSync(`${here}../README.md`, 'utf8');
  const section = readme.slice(readme.indexOf('## Quick start'));
  return section.match(/```js\n([\s\S]*?)```/)[1];
}

main(async (out) => {
  // The quick start, on a new thread (nobody ran on it yet).
  const rendered = [];
  let finished;
  const done = new Promise((resolve) => { finished = resolve; });
  Object.assign(globalThis, {
    WebSocket, // what Node ≥ 22 and browsers have built in
    getJwt: () => granteeToken,
    render: (seq, event) => { rendered.push([seq, event.type]); if (event.type === 'RUN_FINISHED') finished(); },
  });
  const code = quickStart().replaceAll('https://gateway.example', base);
  out.quickStartCode = code;
  // Inside the package, so `@agui-gateway/client` resolves to this package.
  const file = `${here}quickstart.generated.mjs`;
  writeFileSync(file, code);
  try {
    await import(file);
  } finally {
    rmSync(file, { force: true });
  }
  await done;
  out.rendered = rendered;

  // A GatewayAgent attached before anyone ran on its thread: subscribed
  // (an empty snapshot at seq 0), then the first run, by someone else, folded live.
  const threadId = `team-7-early-${Date.now()}`;
  const watcher = new GatewayAgent({ url: base, token: granteeToken, WebSocket, agent: 'support', threadId });
  let folded;
  const watcherFolded = new Promise((resolve) => { folded = resolve; });
  watcher.subscribe({ onRunFinalized: () => folded() });
  await watcher.attach();
  out.attached = { seq: watcher.session.seq, ready: watcher.session.ready };
  const runner = connect(base, runnerToken);
  await runner.connect();
  const session = runner.session(threadId);
  const ended = session.runEnded('first');
  await session.run({ agent: 'support', runId: 'first', messages: [userMessage('m1', 'hello from the runner')] });
  await ended;
  await watcherFolded;
  out.watcherMessages = watcher.messages.map((m) => ({ role: m.role, content: m.content }));
  out.runnerMessages = session.messages.map((m) => ({ role: m.role, content: m.content }));
  await watcher.detach();
  runner.close();
});
