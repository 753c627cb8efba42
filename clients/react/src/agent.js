// @agui-gateway/react/agent — useGatewayAgent, for AG-UI and CopilotKit apps
// (needs @ag-ui/client and rxjs, GatewayAgent's peers).

import { useCallback, useEffect, useMemo, useReducer, useState } from 'react';
import { GatewayAgent } from '@agui-gateway/client/agent';

/**
 * A GatewayAgent (an @ag-ui/client AbstractAgent whose runs go through the
 * gateway and which folds other people's runs live) for the component's
 * life, on a shared `connection`: `{agent, messages, state, isRunning,
 * pendingInterrupts, error, runAgent, addMessage}`. Hand `agent` to
 * CopilotKit, or render from the fields. A new one is made when
 * `connection`, `agent` or `threadId` change.
 */
export function useGatewayAgent(config) {
  const { connection, agent: agentId, threadId } = config;
  if (!connection) throw new TypeError('useGatewayAgent: `connection` is required (useGatewayConnection makes one)');
  const agent = useMemo(() => new GatewayAgent(config), [connection, agentId, threadId]);
  const [, rendered] = useReducer((n) => n + 1, 0);
  const [error, setError] = useState(null);
  useEffect(() => {
    // Every change @ag-ui/client reports re-renders (the agent's own fields
    // are read at render time).
    const { unsubscribe } = agent.subscribe({
      onMessagesChanged: rendered,
      onStateChanged: rendered,
      onRunInitialized: rendered,
      onRunFinalized: rendered,
      onRunFailed: rendered,
    });
    agent.attach().then(rendered, (e) => setError(e));
    return unsubscribe;
  }, [agent]);
  const runAgent = useCallback((parameters) => agent.runAgent(parameters), [agent]);
  const addMessage = useCallback((message) => { agent.addMessage(message); rendered(); }, [agent]);
  return {
    agent,
    messages: agent.messages,
    state: agent.state,
    isRunning: agent.isRunning,
    pendingInterrupts: agent.pendingInterrupts,
    runStatus: agent.runStatus,
    error,
    runAgent,
    addMessage,
  };
}
