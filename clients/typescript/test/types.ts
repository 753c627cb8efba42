// Compiled by `npm test` (tsc --noEmit): the declarations are usable the way
// the README shows, and GatewayAgent is an @ag-ui/client AbstractAgent.
import { AbstractAgent } from '@ag-ui/client';
import { GatewayConnection, GatewayError, PROTOCOL, type ErrorCode, type SnapshotFrame } from '@agui-gateway/client';
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
}
void use;
