// Compiled by `npm test` (tsc --strict, no skipLibCheck): the hooks' types
// are usable the way the README shows.
import { EventType } from '@ag-ui/core';
import { useGatewayConnection, useThread, type ThreadView } from '@agui-gateway/react';
import { useGatewayAgent } from '@agui-gateway/react/agent';

export function Thread({ threadId }: { threadId: string }) {
  const connection = useGatewayConnection({ url: 'https://gateway.example', token: async () => 'jwt' });
  const thread: ThreadView<{ count?: number }> = useThread<{ count?: number }>(connection, threadId);
  const { messages, isRunning, run, regenerate, alternatives, siblings, continueFrom, runs } = thread;
  const last = messages.at(-1);
  const options = last ? alternatives(last.id) : [];
  const send = async (text: string) => {
    const ack = await run({ agent: 'support', messages: [{ id: crypto.randomUUID(), role: 'user', content: text }] });
    const again = await regenerate(undefined, { runId: `${ack.runId}-again` });
    await continueFrom(again.runId, { agent: 'support', messages: [] });
    return siblings(ack.runId).length + (runs?.length ?? 0) + (thread.state.count ?? 0);
  };
  void EventType.RUN_FINISHED;
  return (
    <div>
      {messages.map((m) => <p key={m.id}>{m.role}: {typeof m.content === 'string' ? m.content : ''}</p>)}
      {options.map(({ run: r, onHead }) => <span key={r.runId}>{onHead ? '*' : ''}{r.runId}</span>)}
      <button disabled={isRunning || thread.status !== 'ready'} onClick={() => void send('hi')}>send</button>
    </div>
  );
}

export function Copilot({ threadId }: { threadId: string }) {
  const connection = useGatewayConnection({ url: 'https://gateway.example', token: 'jwt' });
  const { agent, messages, isRunning, runAgent, addMessage } = useGatewayAgent({ connection, agent: 'support', threadId });
  const ask = async () => {
    addMessage({ id: crypto.randomUUID(), role: 'user', content: 'hi' });
    await runAgent();
  };
  void agent.threadId;
  return <button disabled={isRunning} onClick={() => void ask()}>{messages.length}</button>;
}
