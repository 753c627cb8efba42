// Types of @agui-gateway/react (src/index.js).
import type {
  AckFrame, AgUiMessage, BranchOptions, CallOptions, ConnectionOptions, ConnectionState, GatewayConnection,
  GatewayError, Interrupt, ResumeCommand, ResumeEntry, RunAck, RunInfo, RunParams, RunRecord, SendOptions, SnapshotFrame,
  Watcher,
} from '@agui-gateway/client';

/** A GatewayConnection for the component's life (connected on mount, closed on unmount). */
export declare function useGatewayConnection(options: ConnectionOptions): GatewayConnection;

export type ThreadStatus = 'connecting' | 'ready' | 'empty' | 'error';

/** What `useThread` returns: the thread's state (a new object on every
 *  change) and stable actions. */
export interface ThreadView<S = unknown> extends ThreadActions {
  /** `empty`: nobody has run on the thread yet (a `run` creates it). */
  status: ThreadStatus;
  error: GatewayError | null;
  /** The connection's state (`open`, `reconnecting`, …). */
  connection: ConnectionState;
  threadId: string;
  seq: number | null;
  /** The thread's messages, folded live. */
  messages: AgUiMessage[];
  state: S;
  latestRun: RunInfo | null;
  isRunning: boolean;
  headRunId: string | null;
  activeAgent: string | null;
  interrupts: Interrupt[];
  /** The runs tree, oldest first (null until loaded, or with `runs: false`). */
  runs: RunRecord[] | null;
  /** Who is watching the thread now, on every node (one entry per person). */
  viewers: Watcher[];
  /** The user ids typing in the thread now. */
  typing: string[];
}

export interface ThreadActions {
  run(params: RunParams, options?: SendOptions): Promise<RunAck>;
  resume(resume: ResumeEntry[], extra?: Omit<ResumeCommand, 'type' | 'threadId' | 'resume'>, options?: SendOptions): Promise<RunAck>;
  regenerate(messageId?: string, extra?: BranchOptions, options?: SendOptions): Promise<RunAck>;
  edit(messageId: string, message: { role: string; content?: unknown; id?: string; [field: string]: unknown }, extra?: BranchOptions, options?: SendOptions): Promise<RunAck>;
  cancel(runId?: string, options?: SendOptions): Promise<AckFrame>;
  meta(metaType: string, payload: Record<string, unknown>, clientEventId?: string, options?: SendOptions): Promise<AckFrame>;
  switchAgent(agent: string, options?: SendOptions): Promise<AckFrame>;
  /** This person is typing (or stopped: `false`); call it on every keystroke. */
  composing(on?: boolean, options?: SendOptions): Promise<AckFrame | null>;
  /** Runs from the end of `runId` instead of the head (a branch). */
  continueFrom(runId: string, params: Omit<RunParams, 'parentRunId'>, options?: SendOptions): Promise<RunAck>;
  /** The conversation at the end of `runId`. */
  viewAt(runId: string, options?: CallOptions): Promise<Omit<SnapshotFrame, 'type'>>;
  /** `runId` and the runs sharing its base, oldest first. */
  siblings(runId: string): RunRecord[];
  /** The sibling runs of the one that produced `messageId` (regenerations,
   *  edits), each with whether it is on the head's branch. */
  alternatives(messageId: string): { run: RunRecord; onHead: boolean }[];
  refreshRuns(): void;
}

export interface UseThreadOptions {
  /** Load the runs tree (default true). */
  runs?: boolean;
}

/** A shared thread as React state: snapshot, then live. */
export declare function useThread<S = unknown>(connection: GatewayConnection, threadId: string, options?: UseThreadOptions): ThreadView<S>;
