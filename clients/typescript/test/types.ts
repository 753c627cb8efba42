// Compiled by `npm test` (tsc --noEmit): the declarations are usable the way
// the README shows, and GatewayAgent is an @ag-ui/client AbstractAgent.
import { AbstractAgent } from '@ag-ui/client';
import { GatewayConnection, GatewayError, PROTOCOL, RUN_KINDS, type ErrorCode, type RunKind, type SnapshotFrame } from '@agui-gateway/client';
import { GatewayAgent } from '@agui-gateway/client/agent';

const connection = new GatewayConnection({ url: 'https://gateway.example', token: async () => 'jwt' });
const session = connection.session('thread-1');
session.on('snapshot', (s: SnapshotFrame) => s.seq);
session.on('event', ({ seq, event }) => `${seq} ${event.type}`);
async function use(): Promise<void> {
  await connection.connect();
  await session.subscribe();
  const ack = await session.run({ agent: 'demo', messages: [{ id: 'm1', role: 'user', content: 'hi' }] });
  const runId: string | null | undefined = ack.runId;
  void runId;
  try {
    await session.cancel();
  } catch (e) {
    if (e instanceof GatewayError) {
      const code: string = e.code;
      void code;
    }
  }
  const agent = new GatewayAgent({ connection, agent: 'demo', threadId: 'thread-1' });
  const base: AbstractAgent = agent;
  await base.runAgent();
  const codes: readonly ErrorCode[] = PROTOCOL.errorCodes;
  void codes;
  // Branches.
  const again = await session.regenerate(undefined, { runId: 'r2' });
  await session.edit('u1', { role: 'user', content: 'better' });
  await session.run({ agent: 'demo', parentRunId: again.runId ?? 'r1', messages: [] });
  const tree = await session.allRuns();
  const siblings = tree.runs.filter((r) => r.parentRunId === tree.runs[0]?.parentRunId).map((r): RunKind => r.kind);
  void siblings;
  const head: string | null = session.headRunId;
  const then = await session.fetchSnapshot(tree.runs[0]?.runId);
  void head; void then.headRunId; void RUN_KINDS;
}
void use;

// Events are @ag-ui/core's union, narrowed by `type`; runs resolve to an ack
// that names the run; every promise takes an AbortSignal; error codes are
// an exact union that still admits a code a newer gateway adds.
import { EventType } from '@ag-ui/core';
import { foldEvent, type AnyErrorCode, type RunAck } from '@agui-gateway/client';
async function typed(): Promise<void> {
  const controller = new AbortController();
  const ack: RunAck = await session.run({ agent: 'demo', messages: [{ id: 'm2', role: 'user', content: 'hi' }] }, { signal: controller.signal, retry: { attempts: 2 } });
  const runId: string = ack.runId;
  for await (const { seq, event } of session.events({ signal: controller.signal })) {
    if (event.type === EventType.TEXT_MESSAGE_CONTENT) {
      const delta: string = event.delta;
      void delta;
    }
    if (event.type === EventType.RUN_FINISHED && event.runId === runId) break;
    void seq;
  }
  await session.runEnded(runId, { signal: controller.signal });
  await session.regenerate(undefined, {}, { signal: controller.signal }).then((a) => a.runId.toUpperCase());
  await connection.request('/v1/agents', { signal: controller.signal }, { retry: { attempts: 1 } });
  const code: AnyErrorCode = 'a_code_from_a_newer_gateway';
  const known: AnyErrorCode = 'not_found';
  void code; void known;
  const view = foldEvent({ messages: session.messages, state: session.state }, { type: 'TEXT_MESSAGE_START', messageId: 'x', role: 'assistant' });
  void view.messages.length;
}
void typed;
