// Types of @agui-gateway/react/agent (src/agent.js).
import type { Interrupt as AgUiInterrupt, Message, RunAgentParameters } from '@ag-ui/client';
import type { GatewayConnection, RunInfo } from '@agui-gateway/client';
import type { GatewayAgent, GatewayAgentConfig } from '@agui-gateway/client/agent';

export type UseGatewayAgentConfig = GatewayAgentConfig & { connection: GatewayConnection };

export interface GatewayAgentView {
  agent: GatewayAgent;
  messages: Message[];
  state: unknown;
  isRunning: boolean;
  pendingInterrupts: AgUiInterrupt[];
  runStatus: RunInfo | null;
  error: unknown;
  runAgent(parameters?: RunAgentParameters): ReturnType<GatewayAgent['runAgent']>;
  addMessage(message: Message): void;
}

/** A GatewayAgent for the component's life, re-rendering on every change. */
export declare function useGatewayAgent(config: UseGatewayAgentConfig): GatewayAgentView;
