// Types of @agui-gateway/client's core (src/index.js). Hand-written next to
// the plain ES module the gateway serves as it is; `npm test` compiles them
// (tsc) together with test/types.ts, which uses every export.

/** A command or reply field list: `name` or `name?` (optional). */
export type FieldList = readonly string[];

export declare const PROTOCOL: {
  readonly subprotocol: 'agui-gateway.v1';
  readonly commands: Readonly<Record<CommandType, FieldList>>;
  readonly replies: Readonly<Record<ReplyType, FieldList>>;
  readonly replyExtensions: Readonly<Partial<Record<ReplyType, FieldList>>>;
  readonly errorCodes: readonly ErrorCode[];
  readonly closeCodes: Readonly<Record<CloseCode, string>>;
};

/** What a run is to its base (docs/protocol.md "Branches"). */
export type RunKind = 'continue' | 'branch' | 'regenerate' | 'edit' | 'resume' | 'handoff';
export declare const RUN_KINDS: readonly RunKind[];

export type CommandType = 'auth' | 'run' | 'resume' | 'regenerate' | 'edit' | 'cancel' | 'switch' | 'subscribe' | 'unsubscribe' | 'meta' | 'ping';
export type ReplyType = 'event' | 'snapshot' | 'ack' | 'error' | 'pong';
/** The contract's stable error codes. */
export type ErrorCode =
  | 'unauthenticated' | 'forbidden' | 'not_found' | 'invalid' | 'conflict'
  | 'rate_limited' | 'too_large' | 'unavailable' | 'internal';
/** Codes of errors the gateway never answered. */
export type ClientErrorCode = 'disconnected' | 'closed' | 'timeout';
export type CloseCode = 4001 | 4003 | 4008 | 4009 | 1001 | 1009 | 1002 | 1007 | 1008;
export declare const CLIENT_ERROR_CODES: readonly ClientErrorCode[];

export type RunStrategy = 'reject' | 'enqueue' | 'interrupt';
export type RunStatus = 'idle' | 'running' | 'interrupted' | 'finished' | 'cancelled' | 'error';

/** An AG-UI event as journaled (camelCase, as the policy left it). */
export interface AgUiEvent {
  type: string;
  [field: string]: unknown;
}

export interface AgUiMessage {
  id: string;
  role: string;
  content?: unknown;
  [field: string]: unknown;
}

export interface ResumeEntry {
  interruptId: string;
  status: 'resolved' | 'cancelled';
  payload?: unknown;
}

export interface Interrupt {
  id: string;
  reason?: string;
  message?: string;
  toolCallId?: string;
  responseSchema?: unknown;
  expiresAt?: string;
  metadata?: unknown;
  [field: string]: unknown;
}

export interface RunInfo {
  runId: string | null;
  agent: string | null;
  status: RunStatus;
  /** The run it started from (null for a thread's first run). */
  parentRunId?: string | null;
  kind?: RunKind;
}

// ----- frames -----

export interface AuthCommand { type: 'auth'; id?: string | number; token: string }
export interface RunCommand {
  type: 'run'; id?: string | number; agent?: string; threadId: string; runId?: string; parentRunId?: string; strategy?: RunStrategy;
  messages?: AgUiMessage[]; tools?: unknown[]; context?: unknown[]; state?: unknown; forwardedProps?: unknown;
}
export interface ResumeCommand {
  type: 'resume'; id?: string | number; threadId: string; resume: ResumeEntry[]; agent?: string; runId?: string;
  messages?: AgUiMessage[]; tools?: unknown[]; context?: unknown[]; forwardedProps?: unknown;
}
export interface CancelCommand { type: 'cancel'; id?: string | number; threadId: string; runId?: string }
/** The thread's next plain run goes to `agent` (docs/protocol.md, "Handoff"). */
export interface SwitchCommand { type: 'switch'; id?: string | number; threadId: string; agent: string }
export interface SubscribeCommand { type: 'subscribe'; id?: string | number; threadId: string; after?: number | string; epoch?: string }
export interface UnsubscribeCommand { type: 'unsubscribe'; id?: string | number; threadId: string }
export interface MetaCommand {
  type: 'meta'; id?: string | number; threadId: string; metaType: string; payload: Record<string, unknown>; clientEventId?: string;
}
export interface PingCommand { type: 'ping'; id?: string | number }
/** What `regenerate` and `edit` may carry besides their own fields. */
export interface BranchOptions {
  agent?: string; runId?: string; strategy?: RunStrategy; tools?: unknown[]; context?: unknown[]; state?: unknown; forwardedProps?: unknown;
}
/** Answer again: a sibling of the run that produced `messageId`. */
export interface RegenerateCommand extends BranchOptions { type: 'regenerate'; id?: string | number; threadId: string; messageId?: string }
/** A user message replaced (same id) on a sibling of the run that introduced it. */
export interface EditCommand extends BranchOptions { type: 'edit'; id?: string | number; threadId: string; messageId: string; message: AgUiMessage }
export type Command =
  | AuthCommand | RunCommand | ResumeCommand | CancelCommand | SwitchCommand | SubscribeCommand
  | UnsubscribeCommand | MetaCommand | PingCommand | RegenerateCommand | EditCommand;

export interface EventFrame { type: 'event'; threadId: string; seq: number; event: AgUiEvent }
export interface SnapshotFrame {
  type: 'snapshot'; threadId: string; seq: number; messages: AgUiMessage[]; state: unknown;
  run: RunInfo | null; headRunId: string | null; activeAgent: string | null; interrupts: Interrupt[]; reset?: boolean;
  /** The epoch of the history `seq` belongs to, when the gateway names it. */
  epoch?: string;
}
export interface AckFrame {
  type: 'ack'; id: string | number | null; threadId?: string; runId?: string | null;
  queued?: number; eventId?: string; duplicate?: boolean;
  /** `subscribe` and `run`: the epoch of the seqs that follow (docs/protocol.md, "Cursors"). */
  epoch?: string;
}
export interface ErrorFrame {
  type: 'error'; id?: string | number; code: ErrorCode; message: string; retryAfter?: number | null; threadId?: string; runId?: string;
}
export interface PongFrame { type: 'pong'; id?: string | number }
export type Reply = EventFrame | SnapshotFrame | AckFrame | ErrorFrame | PongFrame;

// ----- errors -----

export declare class GatewayError extends Error {
  constructor(code: ErrorCode | ClientErrorCode | string, message?: string, details?: Record<string, unknown>);
  readonly name: 'GatewayError';
  code: ErrorCode | ClientErrorCode | string;
  /** Seconds, with `rate_limited`. */
  retryAfter?: number;
  /** The WebSocket close code that ended the connection, if one did. */
  closeCode?: number;
  threadId?: string;
  runId?: string;
  /** The HTTP status, for errors of `request()`. */
  status?: number;
  static from(body: { code?: string; message?: string; [k: string]: unknown }, extra?: Record<string, unknown>): GatewayError;
}

export declare function tokenClaims(token: string): { exp?: number; sub?: string; [claim: string]: unknown } | null;

// ----- connection -----

export type TokenReason = 'initial' | 'reconnect' | 'expiring' | 'rejected';
export type TokenProvider = (context: { reason: TokenReason; previous?: string | null }) =>
  string | null | undefined | Promise<string | null | undefined>;

/** What the connection needs of a WebSocket class (the browser's, Node ≥ 22's, or `ws`). */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

export interface ConnectionOptions {
  /** The gateway (`https://host`) or its WebSocket URL (`wss://host/v1/ws`). */
  url: string;
  /** A token, or a provider asked again before expiry and after a 4001. */
  token: string | TokenProvider;
  /** Default: `globalThis.WebSocket` (browsers, Node ≥ 22). */
  WebSocket?: WebSocketConstructor | unknown;
  /** Default: `globalThis.fetch`. */
  fetch?: typeof fetch;
  reconnect?: { initialDelayMs?: number; maxDelayMs?: number; factor?: number; jitter?: number };
  /** Default 15000; 0 turns liveness pings off. */
  pingIntervalMs?: number;
  /** Default 10000. */
  pingTimeoutMs?: number;
  /** Default 30000; 0 waits forever. */
  requestTimeoutMs?: number;
  /** How long before `exp` a token is refreshed (at most half its life). Default 30000. */
  refreshLeadMs?: number;
  /** Default true. */
  autoRefresh?: boolean;
}

export type ConnectionState = 'idle' | 'connecting' | 'open' | 'reconnecting' | 'closed';

export interface ConnectionEvents {
  state: ConnectionState;
  open: undefined;
  close: { code: number; reason: string; wasOpen: boolean; error?: GatewayError };
  retry: { delayMs: number; attempt: number; reason: string };
  token: string;
  frame: Reply;
  error: GatewayError;
}

declare class Emitter<Events> {
  on<K extends keyof Events>(type: K, listener: (value: Events[K]) => void): () => void;
  off<K extends keyof Events>(type: K, listener: (value: Events[K]) => void): void;
  emit<K extends keyof Events>(type: K, value: Events[K]): void;
}

export declare class GatewayConnection extends Emitter<ConnectionEvents> {
  constructor(options: ConnectionOptions);
  readonly url: string;
  readonly state: ConnectionState;
  readonly isOpen: boolean;
  /** The token the connection authenticated with last. */
  readonly token: string | null;
  readonly sessions: Map<string, ThreadSession>;
  connect(): Promise<void>;
  send(command: Command | { type: string; [field: string]: unknown }): Promise<AckFrame | PongFrame>;
  authenticate(token: string): Promise<void>;
  session(threadId: string): ThreadSession;
  request<T = unknown>(path: string, init?: RequestInit): Promise<T>;
  close(): void;
}

// ----- sessions -----

export interface SessionEvents {
  snapshot: SnapshotFrame;
  event: { seq: number; event: AgUiEvent };
  reset: { previousSeq: number | null; snapshot: SnapshotFrame };
  gap: { expected: number; got: number };
  error: GatewayError;
}

export interface RunParams {
  agent: string;
  runId?: string;
  /** AG-UI `Message`s: the NEW ones only (the gateway holds the history). */
  messages?: AgUiMessage[];
  tools?: unknown[];
  context?: unknown[];
  state?: unknown;
  forwardedProps?: unknown;
  strategy?: RunStrategy;
  /** Start from the end of this run of the thread instead of the head (a branch). */
  parentRunId?: string;
}

/** One run of a thread's tree (`GET /v1/threads/{id}/runs`). */
export interface RunRecord {
  runId: string;
  /** Its base; siblings share it (null for the first run). */
  parentRunId: string | null;
  kind: RunKind;
  agent: string | null;
  startedBy: string | null;
  status: RunStatus;
  outcome: unknown;
  startedSeq: number | null;
  endedSeq: number | null;
  createdAt: number | string | null;
  inputMessageIds: string[];
  outputMessageIds: string[];
  [field: string]: unknown;
}

export interface RunTree {
  threadId: string;
  headRunId: string | null;
  runs: RunRecord[];
  /** The `cursor` of the next page, null on the last. */
  nextCursor: number | null;
}

export declare class ThreadSession extends Emitter<SessionEvents> {
  readonly connection: GatewayConnection;
  readonly threadId: string;
  /** The last seq applied (null before the first snapshot or event). */
  readonly seq: number | null;
  /** The epoch of the history `seq` belongs to, as the gateway's acks name
   *  it (null: none named). Sent back with `seq` when resubscribing: a seq
   *  of a history the gateway's store lost gets a reset snapshot. */
  readonly epoch: string | null;
  /** The messages and state of the latest snapshot (the folded view after every event is GatewayAgent's). */
  readonly messages: AgUiMessage[];
  readonly state: unknown;
  readonly latestRun: RunInfo | null;
  /** The thread's head: the newest run started (what the live view shows). */
  readonly headRunId: string | null;
  /** The agent speaking on the thread (handoff, switch), or null. */
  readonly activeAgent: string | null;
  readonly interrupts: Interrupt[];
  subscribe(): Promise<void>;
  whenReady(): Promise<void>;
  resync(): void;
  unsubscribe(): Promise<void>;
  close(): Promise<void>;
  runEnded(runId: string): Promise<AgUiEvent>;
  run(params: RunParams): Promise<AckFrame>;
  resume(resume: ResumeEntry[], extra?: Omit<ResumeCommand, 'type' | 'threadId' | 'resume'>): Promise<AckFrame>;
  cancel(runId?: string): Promise<AckFrame>;
  /** The thread's next plain run goes to `agent`. */
  switchAgent(agent: string): Promise<AckFrame>;
  meta(metaType: string, payload: Record<string, unknown>, clientEventId?: string): Promise<AckFrame>;
  /** The snapshot now, or at the end of run `runId` (its branch). */
  fetchSnapshot(runId?: string): Promise<Omit<SnapshotFrame, 'type'>>;
  regenerate(messageId?: string, extra?: BranchOptions): Promise<AckFrame>;
  edit(messageId: string, message: Omit<AgUiMessage, 'id'> & { id?: string }, extra?: BranchOptions): Promise<AckFrame>;
  /** One page of the run tree. */
  runs(page?: { cursor?: number; limit?: number }): Promise<RunTree>;
  /** Every page of the run tree. */
  allRuns(): Promise<RunTree>;
}

/** Options of {@link joinStream}. */
export interface JoinStreamOptions {
  base: string;
  threadId: string;
  token: string | (() => string | Promise<string>);
  onEvent?: (event: AgUiEvent, cursor: string | null) => void;
  onError?: (error: unknown) => void;
  after?: string | number;
  retryMs?: number;
  EventSource?: unknown;
  fetch?: typeof fetch;
}

/** A thread's SSE join stream through the platform's `EventSource`, opened
 *  again with a new ticket and `lastEventId=` when the platform gives up
 *  (a restarted gateway forgot the ticket): it continues exactly. */
export function joinStream(options: JoinStreamOptions): {
  close(): void;
  readonly lastEventId: string | null;
  readonly opens: number;
};
