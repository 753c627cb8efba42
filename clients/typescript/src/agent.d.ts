// Types of @agui-gateway/client/agent (src/agent.js).
//
// No type comes from `rxjs` directly: @ag-ui/client pins its own rxjs, and
// an app's newer one would be a second, incompatible `Observable` (TS2416).
// `run()` returns exactly what AbstractAgent's does.
import { AbstractAgent, type AgentConfig } from '@ag-ui/client';
import type { RunAgentInput } from '@ag-ui/core';
import type { ConnectionOptions, GatewayConnection, RunInfo, RunStrategy, ThreadSession } from './index.js';

export { GatewayConnection, GatewayError } from './index.js';

export type GatewayAgentConfig = AgentConfig & {
  /** The gateway's agent id (`GET /v1/agents`). */
  agent: string;
  threadId: string;
  /** Fold other people's runs on the thread live (default true). */
  follow?: boolean;
  strategy?: RunStrategy;
} & ({ connection: GatewayConnection } | (ConnectionOptions & { connection?: undefined }));

/**
 * An @ag-ui/client agent whose runs go through the gateway's WebSocket and
 * which also folds the runs other people start on its thread.
 */
export declare class GatewayAgent extends AbstractAgent {
  constructor(config: GatewayAgentConfig);
  readonly connection: GatewayConnection;
  readonly session: ThreadSession;
  /** The thread's latest run as the gateway reports it. */
  readonly runStatus: RunInfo | null;
  attach(): Promise<void>;
  detach(): Promise<void>;
  run(input: RunAgentInput): ReturnType<AbstractAgent['run']>;
  clone(): GatewayAgent;
}
