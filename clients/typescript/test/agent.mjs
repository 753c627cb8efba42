// GatewayAgent driven by @ag-ui/client's own runAgent: a tool call that needs
// approval (an interrupt), answered with resume, then another turn; a second
// GatewayAgent on the thread folds the first one's runs live. Both end with
// the messages of the gateway's own snapshot.
// usage: node agent.mjs <base> <token> <agent>
import WebSocket from 'ws';
import { GatewayAgent } from '../src/agent.js';
import { main, userMessage } from './util.mjs';

const [base, token, agentId] = process.argv.slice(2);
const threadId = `agent-${Date.now()}`;

/** What both sides must agree on: ids, roles, text, tool calls and results. */
const shape = (messages) => messages.map((m) => ({
  id: m.id,
  role: m.role,
  content: typeof m.content === 'string' && m.content !== '' ? m.content : undefined,
  toolCalls: m.toolCalls?.map((c) => ({ id: c.id, name: c.function.name, arguments: JSON.parse(c.function.arguments || '{}') })),
  toolCallId: m.toolCallId,
}));

main(async (out) => {
  const first = new GatewayAgent({ url: base, token, WebSocket, agent: agentId, threadId });
  const firstEvents = [];
  first.subscribe({ onEvent: ({ event }) => { firstEvents.push(event.type); } });
  first.addMessage(userMessage('u1', 'transfer 500 to acct-9'));
  const asked = await first.runAgent({ runId: 'run-ask' });
  // A second agent (its own connection) joins the thread the first created:
  // the snapshot, then the first one's runs, live.
  const watcher = new GatewayAgent({ url: base, token, WebSocket, agent: agentId, threadId });
  const watcherRuns = [];
  let watcherDone;
  const watcherFolded = new Promise((resolve) => { watcherDone = resolve; });
  watcher.subscribe({
    onRunStartedEvent: ({ event }) => { watcherRuns.push(event.runId); },
    onRunFinalized: ({ input }) => { if (input.runId === 'run-turn3') watcherDone(); },
  });
  await watcher.attach();
  out.watcherPendingAtJoin = watcher.pendingInterrupts.map((i) => i.id);
  out.askNew = asked.newMessages.map((m) => m.role);
  out.pending = first.pendingInterrupts.map((i) => ({ id: i.id, reason: i.reason, toolCallId: i.toolCallId }));
  out.status1 = first.runStatus;
  const resume = first.pendingInterrupts.map((i) => ({ interruptId: i.id, status: 'resolved', payload: { approved: true } }));
  const answered = await first.runAgent({ runId: 'run-answer', resume });
  out.answerNew = answered.newMessages.map((m) => m.role);
  out.pendingAfter = first.pendingInterrupts.length;
  first.addMessage(userMessage('u2', 'thanks, and again?'));
  await first.runAgent({ runId: 'run-turn3' });
  out.status3 = first.runStatus;

  // The watcher folded the same runs, live, with @ag-ui/client's machinery.
  await watcherFolded;
  out.watcherRuns = watcherRuns;
  const snapshot = await first.session.fetchSnapshot();
  out.snapshotMessages = shape(snapshot.messages);
  out.firstMessages = shape(first.messages);
  out.watcherMessages = shape(watcher.messages);
  out.firstEventTypes = firstEvents;
  await watcher.detach();
  await first.detach();
});
