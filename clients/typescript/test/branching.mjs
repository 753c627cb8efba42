// A thread that branches (docs/protocol.md "Branches"), driven through the
// package against the scripted agent's `history` scenario (it reports the
// history it was sent in a CUSTOM "history" event and answers "a-<runId>"):
// - A (a GatewayAgent) runs two turns, then regenerates the last answer,
//   edits the second question and continues from the regenerated run with
//   `run({parentRunId})`;
// - B joined after the first run (snapshot, then live) and folds every fork
//   live; L joined after the second run, is cut off before the forks and
//   resumes after its last seq once they are journaled;
// - after each fork A and B end with the gateway's snapshot; L does after
//   its resume; `allRuns()` shows the tree and `fetchSnapshot(runId)` the
//   view at a run. The assertions are in tests/clients.rs.
// usage: node branching.mjs <base> <token> <agent>
import WebSocket from 'ws';
import { GatewayAgent } from '../src/agent.js';
import { main, userMessage } from './util.mjs';

const [base, token, agentId] = process.argv.slice(2);
const threadId = `branch-${Date.now()}`;

const shape = (messages) => messages.map((m) => ({ id: m.id, role: m.role, content: m.content }));

/** Resolves once `agent` has folded run `runId` (its own or someone else's). */
const folded = (agent, runId) => new Promise((resolve) => {
  const { unsubscribe } = agent.subscribe({
    onRunFinalized: ({ input }) => {
      if (input.runId === runId) {
        unsubscribe();
        resolve();
      }
    },
  });
});

main(async (out) => {
  const a = new GatewayAgent({ url: base, token, WebSocket, agent: agentId, threadId });
  // What the agent was sent, per run (its CUSTOM "history" report).
  const sent = {};
  a.session.on('event', ({ event }) => {
    if (event.type === 'CUSTOM' && event.name === 'history') sent[a.session.latestRun.runId] = event.value.messages.map((m) => m.id);
  });
  a.addMessage(userMessage('u1', 'one'));
  await a.runAgent({ runId: 'r1' });

  const b = new GatewayAgent({ url: base, token, WebSocket, agent: agentId, threadId });
  await b.attach();
  out.bJoinedAt = b.session.seq;

  a.addMessage(userMessage('u2', 'two'));
  let bDone = folded(b, 'r2');
  await a.runAgent({ runId: 'r2' });
  await bDone;

  // L joins now; its socket is then cut and held off (the token provider
  // waits on reconnect) until every fork is journaled.
  let release;
  const held = new Promise((resolve) => { release = resolve; });
  const l = new GatewayAgent({
    url: base,
    WebSocket,
    agent: agentId,
    threadId,
    reconnect: { initialDelayMs: 20, maxDelayMs: 50 },
    token: async ({ reason }) => {
      if (reason === 'reconnect') await held;
      return token;
    },
  });
  await l.attach();
  out.lJoinedAt = l.session.seq;
  const lReconnecting = new Promise((resolve) => { const stop = l.connection.on('state', (s) => { if (s === 'reconnecting') { stop(); resolve(); } }); });
  l.connection.ws.terminate();
  await lReconnecting;

  /** Starts a fork with `start`, waits until A and B folded it, and records
   *  both views against the gateway's snapshot. */
  const views = {};
  const fork = async (runId, start) => {
    const done = Promise.all([folded(a, runId), folded(b, runId)]);
    const ack = await start();
    await done;
    const snapshot = await a.session.fetchSnapshot();
    views[runId] = {
      ackRunId: ack.runId,
      snapshot: shape(snapshot.messages),
      headRunId: snapshot.headRunId,
      run: snapshot.run,
      a: shape(a.messages),
      b: shape(b.messages),
      aHead: a.session.headRunId,
      bHead: b.session.headRunId,
      bRun: b.session.latestRun,
    };
  };
  await fork('r3', () => a.session.regenerate(undefined, { runId: 'r3' }));
  await fork('r4', () => a.session.edit('u2', { role: 'user', content: 'two, edited' }, { runId: 'r4' }));
  await fork('r5', () => a.session.run({ agent: agentId, runId: 'r5', parentRunId: 'r3', messages: [userMessage('u3', 'three')] }));
  out.views = views;
  out.sent = sent;

  // L comes back: it resumes after its last seq, across the three forks.
  const lDone = folded(l, 'r5');
  const lResumedFrom = l.session.seq;
  const subscribed = [];
  l.connection.on('frame', (f) => { if (f.type === 'snapshot') subscribed.push(`snapshot@${f.seq}`); });
  release();
  await lDone;
  const final = await a.session.fetchSnapshot();
  out.final = shape(final.messages);
  out.l = { resumedFrom: lResumedFrom, snapshots: subscribed, messages: shape(l.messages), head: l.session.headRunId };

  // The tree, and the views at runs that are no longer the head's branch.
  const tree = await a.session.allRuns();
  out.tree = { headRunId: tree.headRunId, runs: tree.runs.map((r) => ({ runId: r.runId, parentRunId: r.parentRunId, kind: r.kind, status: r.status })) };
  out.page1 = (await a.session.runs({ limit: 2 })).nextCursor;
  out.at = {};
  for (const runId of ['r2', 'r3', 'r4']) out.at[runId] = shape((await a.session.fetchSnapshot(runId)).messages).map((m) => `${m.id}:${m.content}`);
  try {
    await a.session.regenerate('no-such-message');
  } catch (e) {
    out.unknownMessage = e.code;
  }
  await Promise.all([a.detach(), b.detach(), l.detach()]);
});
