// The hooks in a real React app (StrictMode, react-dom, Chromium), driven
// by test/browser.mjs against a real gateway. A (useThread) starts the
// thread; B (useGatewayAgent) mounts after the first run (snapshot, then
// live); A regenerates, B runs through @ag-ui/client's runAgent, and both
// are read from what React RENDERED (the DOM), not from the hooks' objects.
import { StrictMode, useEffect } from 'react';
import { createRoot } from 'react-dom/client';
import { useGatewayConnection, useThread } from '@agui-gateway/react';
import { useGatewayAgent } from '@agui-gateway/react/agent';

const params = new URLSearchParams(location.search);
const token = params.get('token');
const agent = params.get('agent');
const gateway = params.get('gateway');
const threadId = `react-${Date.now()}`;
const views = {};
const renders = { a: 0, b: 0, c: 0 };
const waiters = [];
const log = [];

/** Resolves once `test()` holds after a commit (checked at every commit). */
const waitFor = (test) => (test() ? Promise.resolve() : new Promise((resolve) => waiters.push({ test, resolve })));
function committed(name, view) {
  views[name] = view;
  renders[name] += 1;
  for (const w of [...waiters]) {
    if (w.test()) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve();
    }
  }
}

const text = (m) => (typeof m.content === 'string' ? m.content : '');
function Messages({ id, messages }) {
  return (
    <ul id={id}>
      {messages.map((m) => <li key={m.id} data-id={m.id} data-role={m.role}>{text(m)}</li>)}
    </ul>
  );
}

function A() {
  const connection = useGatewayConnection({ url: gateway, token });
  const view = useThread(connection, threadId);
  useEffect(() => committed('a', view));
  useEffect(() => {
    const stops = [connection.on('close', (c) => log.push(['close', c.code, c.reason])), connection.on('retry', (r) => log.push(['retry', r.reason]))];
    return () => stops.forEach((f) => f());
  }, [connection]);
  return <Messages id="a" messages={view.messages} />;
}

function B() {
  const connection = useGatewayConnection({ url: gateway, token });
  const view = useGatewayAgent({ connection, agent, threadId });
  useEffect(() => committed('b', view));
  return <Messages id="b" messages={view.messages} />;
}

function C() {
  const connection = useGatewayConnection({ url: gateway, token });
  const view = useThread(connection, threadId, { runs: false });
  useEffect(() => committed('c', view));
  return <p id="c">{view.typing.join(', ')}</p>;
}

/** What a list rendered: `id:role:text` per message. */
const dom = (id) => [...document.querySelectorAll(`#${id} li`)].map((li) => `${li.dataset.id}:${li.dataset.role}:${li.textContent}`);
const shape = (messages) => messages.map((m) => `${m.id}:${m.role}:${text(m)}`);
const finished = (runId) => () => views.a?.latestRun?.runId === runId && views.a.latestRun.status === 'finished'
  && views.a.runs?.some((r) => r.runId === runId && r.status === 'finished');

/** How far the run got and what each hook holds (reported on a hang). */
window.__progress = () => ({
  a: views.a && { status: views.a.status, connection: views.a.connection, error: String(views.a.error ?? ''), latestRun: views.a.latestRun, runs: views.a.runs?.map((r) => [r.runId, r.status]), dom: dom('a') },
  b: views.b && { messages: views.b.messages.length, running: views.b.isRunning, error: String(views.b.error ?? ''), dom: dom('b') },
  renders,
  log,
});

window.__run = async () => {
  const out = { threadId };
  createRoot(document.getElementById('root-a')).render(<StrictMode><A /></StrictMode>);
  await waitFor(() => views.a?.status === 'empty');
  out.statusBefore = views.a.status;
  const ack = await views.a.run({ agent, runId: 'x1', messages: [{ id: 'u1', role: 'user', content: 'hello from react' }] });
  out.ackRunId = ack.runId;
  await waitFor(finished('x1'));
  const snap1 = shape((await views.a.viewAt('x1')).messages);
  await waitFor(() => dom('a').length === snap1.length);
  out.x1 = { a: dom('a'), snapshot: snap1, status: views.a.status };

  createRoot(document.getElementById('root-b')).render(<StrictMode><B /></StrictMode>);
  await waitFor(() => dom('b').length === snap1.length);
  out.bJoined = dom('b');
  // C subscribes to the thread: one person (the same token) on three
  // connections; typing shows in the view until stopped.
  createRoot(document.getElementById('root-c')).render(<StrictMode><C /></StrictMode>);
  await waitFor(() => views.c?.viewers.length === 1 && views.c.viewers[0].connections === 3);
  out.viewers = views.c.viewers.map((w) => [w.userId, w.connections]);
  // A, whose own run created the thread, knows who is there (its run's
  // ack) and is told who types.
  await views.c.composing();
  await waitFor(() => views.c.typing.length === 1);
  out.typing = views.c.typing;
  await waitFor(() => views.a.typing.length === 1);
  out.viewersA = views.a.viewers.map((w) => w.userId);
  out.typingA = views.a.typing;
  await views.c.composing(false);
  await waitFor(() => views.c.typing.length === 0);

  const again = await views.a.regenerate(undefined, { runId: 'x2' });
  out.regenerateAckRunId = again.runId;
  await waitFor(finished('x2'));
  const snap2 = shape((await views.a.viewAt('x2')).messages);
  await waitFor(() => JSON.stringify(dom('a')) === JSON.stringify(snap2) && JSON.stringify(dom('b')) === JSON.stringify(snap2));
  const answer = views.a.messages.at(-1).id;
  out.x2 = {
    a: dom('a'),
    b: dom('b'),
    snapshot: snap2,
    latestRun: views.a.latestRun,
    siblings: views.a.siblings('x2').map((r) => r.runId),
    alternatives: views.a.alternatives(answer).map(({ run, onHead }) => [run.runId, onHead]),
  };

  views.b.addMessage({ id: 'u3', role: 'user', content: 'from b' });
  await views.b.runAgent({ runId: 'x3' });
  await waitFor(finished('x3'));
  const snap3 = shape((await views.a.viewAt('x3')).messages);
  await waitFor(() => JSON.stringify(dom('a')) === JSON.stringify(snap3) && JSON.stringify(dom('b')) === JSON.stringify(snap3));
  out.x3 = { a: dom('a'), b: dom('b'), snapshot: snap3, head: views.a.headRunId, bRunning: views.b.isRunning };
  out.renders = renders;
  return out;
};
