// Types of @agui-gateway/client's core (src/index.js). Hand-written next to
// the plain ES module the gateway serves as it is; `npm test` compiles them
// (tsc) together with test/types.ts, which uses every export. AG-UI's own
// shapes (events, messages) are @ag-ui/core's, imported as types only: the
// module itself has no imports.
import type { AGUIEvent, Message } from '@ag-ui/core';

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

export type CommandType = 'auth' | 'run' | 'resume' | 'regenerate' | 'edit' | 'cancel' | 'switch' | 'subscribe' | 'unsubscribe' | 'meta' | 'composing' | 'ping';
export type ReplyType = 'event' | 'snapshot' | 'ack' | 'error' | 'pong';
/** The contract's stable error codes. */
export type ErrorCode =
  | 'unauthenticated' | 'forbidden' | 'not_found' | 'invalid' | 'conflict'
  | 'rate_limited' | 'too_large' | 'unavailable' | 'internal';
/** Codes of errors the gateway never answered (`aborted`: the call's AbortSignal). */
export type ClientErrorCode = 'disconnected' | 'closed' | 'timeout' | 'aborted';
/** What `GatewayError.code` may hold: the known codes (autocompleted and
 *  checked) and any code a newer gateway adds (`string & {}` keeps the
 *  literals from collapsing into `string`). */
export type AnyErrorCode = ErrorCode | ClientErrorCode | (string & {});
export type CloseCode = 4001 | 4003 | 4008 | 4009 | 1001 | 1009 | 1002 | 1007 | 1008;
export declare const CLIENT_ERROR_CODES: readonly ClientErrorCode[];

export type RunStrategy = 'reject' | 'enqueue' | 'interrupt';
export type RunStatus = 'idle' | 'running' | 'interrupted' | 'finished' | 'cancelled' | 'error';

/** An AG-UI event as journaled: @ag-ui/core's union, narrowed by `type`
 *  (`EventType.TEXT_MESSAGE_CONTENT` …). The gateway is lossless: an event
 *  type newer than your @ag-ui/core still arrives, unchanged (a `default:`
 *  branch of a `switch (event.type)` sees it). */
export type AgUiEvent = AGUIEvent;

/** An AG-UI message (@ag-ui/core's `Message`). */
export type AgUiMessage = Message;
/** A message as a command carries it (a user message needs no more). */
export type MessageInput = Message | { id: string; role: string; content?: unknown; [field: string]: unknown };

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
  /** Who started it (the token's `sub`; for a resume, who answered the interrupts). */
  startedBy?: string | null;
}

// ----- frames -----

export interface AuthCommand { type: 'auth'; id?: string | number; token: string }
export interface RunCommand {
  type: 'run'; id?: string | number; agent?: string; threadId: string; runId?: string; parentRunId?: string; strategy?: RunStrategy;
  messages?: MessageInput[]; tools?: unknown[]; context?: unknown[]; state?: unknown; forwardedProps?: unknown;
}
export interface ResumeCommand {
  type: 'resume'; id?: string | number; threadId: string; resume: ResumeEntry[]; agent?: string; runId?: string;
  messages?: MessageInput[]; tools?: unknown[]; context?: unknown[]; forwardedProps?: unknown;
}
export interface CancelCommand { type: 'cancel'; id?: string | number; threadId: string; runId?: string }
/** The thread's next plain run goes to `agent` (docs/protocol.md, "Handoff"). */
export interface SwitchCommand { type: 'switch'; id?: string | number; threadId: string; agent: string }
/** Typing in a thread the connection watches (`false`: stopped). */
export interface ComposingCommand { type: 'composing'; id?: string | number; threadId: string; composing?: boolean }
export interface SubscribeCommand { type: 'subscribe'; id?: string | number; threadId: string; after?: number | string; epoch?: string; presence?: boolean }
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
export interface EditCommand extends BranchOptions { type: 'edit'; id?: string | number; threadId: string; messageId: string; message: MessageInput }
export type Command =
  | AuthCommand | RunCommand | ResumeCommand | CancelCommand | SwitchCommand | SubscribeCommand
  | UnsubscribeCommand | MetaCommand | ComposingCommand | PingCommand | RegenerateCommand | EditCommand;

export interface EventFrame { type: 'event'; threadId: string; seq: number; event: AgUiEvent }
/** Who posted a meta event on a message (docs/protocol.md, "Attribution"). */
export interface MetaNote {
  id: string; metaType: string; by: string; at?: number;
  payload?: Record<string, unknown>; payloadOmitted?: boolean;
}

export interface SnapshotFrame {
  type: 'snapshot'; threadId: string; seq: number; messages: AgUiMessage[]; state: unknown;
  run: RunInfo | null; headRunId: string | null; activeAgent: string | null; activeAgentBy?: string | null; interrupts: Interrupt[]; meta?: Record<string, MetaNote[]>; reset?: boolean;
  /** The epoch of the history `seq` belongs to, when the gateway names it. */
  epoch?: string;
}
export interface AckFrame {
  type: 'ack'; id: string | number | null; threadId?: string; runId?: string | null;
  queued?: number; eventId?: string; duplicate?: boolean;
  /** `subscribe` and `run`: the epoch of the seqs that follow (docs/protocol.md, "Cursors"). */
  epoch?: string;
  /** `subscribe`: who is watching the thread, this connection included. */
  presence?: Watcher[];
  /** `composing`: how long the signal holds unrepeated (ms). */
  lapseMs?: number;
}
export interface ErrorFrame {
  type: 'error'; id?: string | number; code: ErrorCode | (string & {}); message: string; retryAfter?: number | null; threadId?: string; runId?: string;
}
export interface PongFrame { type: 'pong'; id?: string | number }
/** One person watching a thread (docs/protocol.md, "Presence"). */
export interface Watcher {
  /** The token's `sub`. */
  userId: string;
  /** The token's `name` claim, when it has one. */
  name?: string;
  roles: string[];
  /** Their open connections on the thread, over every node. */
  connections: number;
  /** When the first of them joined (Unix ms). */
  since: number;
  /** Typing in the thread now. */
  composing?: boolean;
}
/** Who joined and who left since the connection was last told. */
export interface PresenceFrame {
  type: 'presence'; threadId: string; joined: Watcher[]; left: { userId: string; name?: string | null }[]; viewers: Watcher[];
  /** The user ids typing now. */
  composing: string[];
}
export type Reply = EventFrame | SnapshotFrame | AckFrame | ErrorFrame | PongFrame | PresenceFrame;
/** The ack of a command that starts a run: it names the run. */
export interface RunAck extends AckFrame { threadId: string; runId: string }

// ----- errors -----

export declare class GatewayError extends Error {
  constructor(code: AnyErrorCode, message?: string, details?: Record<string, unknown>);
  readonly name: 'GatewayError';
  code: AnyErrorCode;
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

/** Backoff between attempts: `attempts` more tries (default 0: none) of a
 *  request the gateway did not carry out (`rate_limited`, `unavailable`, a
 *  command sent while the socket was down, a lost answer to a GET). */
export interface RetryOptions { attempts?: number; initialDelayMs?: number; maxDelayMs?: number; factor?: number }

/** What every call that returns a promise accepts. Aborting rejects the
 *  call with a GatewayError `aborted` and stops the waiting; a command that
 *  was already sent stays sent (`cancel()` stops a run). */
export interface CallOptions { signal?: AbortSignal }
export interface SendOptions extends CallOptions { retry?: RetryOptions }

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
  /** Retries of commands and HTTP requests (default: none). */
  retry?: RetryOptions;
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
  connect(options?: CallOptions): Promise<void>;
  send(command: Command | { type: string; [field: string]: unknown }, options?: SendOptions): Promise<AckFrame | PongFrame>;
  authenticate(token: string): Promise<void>;
  session(threadId: string): ThreadSession;
  /** A JSON request to the gateway's HTTP API with the current token
   *  (`init.signal` aborts it); an error answer rejects with its code. */
  request<T = unknown>(path: string, init?: RequestInit, options?: { retry?: RetryOptions }): Promise<T>;
  close(): void;
}

// ----- sessions -----

export interface SessionEvents {
  snapshot: SnapshotFrame;
  event: { seq: number; event: AgUiEvent };
  reset: { previousSeq: number | null; snapshot: SnapshotFrame };
  gap: { expected: number; got: number };
  error: GatewayError;
  /** Someone joined or left the thread, or started or stopped typing
   *  (`viewers()` is the list after it; `composing` who types now). */
  presence: { joined: Watcher[]; left: { userId: string; name?: string | null }[]; viewers: Watcher[]; composing: string[] };
}

export interface RunParams {
  agent: string;
  runId?: string;
  /** AG-UI `Message`s: the NEW ones only (the gateway holds the history). */
  messages?: MessageInput[];
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
  /** The thread's messages, folded live after every event (a new array when
   *  they change). */
  readonly messages: AgUiMessage[];
  /** The thread's state, folded live (STATE_SNAPSHOT, STATE_DELTA). */
  readonly state: unknown;
  readonly latestRun: RunInfo | null;
  /** The thread's head: the newest run started (what the live view shows). */
  readonly headRunId: string | null;
  /** The agent speaking on the thread (handoff, switch), or null. */
  readonly activeAgent: string | null;
  readonly interrupts: Interrupt[];
  /** Who is watching the thread now, on every node (one entry per person;
   *  kept current by the gateway's `presence` frames). */
  viewers(): Watcher[];
  /** Subscribes; resolves once the snapshot (or the catch-up) is in. */
  subscribe(options?: CallOptions): Promise<void>;
  whenReady(options?: CallOptions): Promise<void>;
  resync(): void;
  unsubscribe(options?: CallOptions): Promise<void>;
  close(): Promise<void>;
  /** The thread's events from now on, each seq once and in order; ends when
   *  `signal` aborts, the loop breaks or the session closes. */
  events(options?: CallOptions): AsyncIterableIterator<{ seq: number; event: AgUiEvent }>;
  /** The event that ends run `runId` (RUN_FINISHED or RUN_ERROR). */
  runEnded(runId: string, options?: CallOptions): Promise<AgUiEvent>;
  run(params: RunParams, options?: SendOptions): Promise<RunAck>;
  resume(resume: ResumeEntry[], extra?: Omit<ResumeCommand, 'type' | 'threadId' | 'resume'>, options?: SendOptions): Promise<RunAck>;
  cancel(runId?: string, options?: SendOptions): Promise<AckFrame>;
  /** The thread's next plain run goes to `agent`. */
  switchAgent(agent: string, options?: SendOptions): Promise<AckFrame>;
  meta(metaType: string, payload: Record<string, unknown>, clientEventId?: string, options?: SendOptions): Promise<AckFrame>;
  /** This person is typing (`on`, the default) or stopped; call it on every
   *  keystroke — repeats are sent only as often as the signal needs.
   *  Resolves with the ack (`lapseMs`), or null when nothing was sent. */
  composing(on?: boolean, options?: SendOptions): Promise<AckFrame | null>;
  /** The snapshot now, or at the end of run `runId` (its branch). */
  fetchSnapshot(runId?: string, options?: CallOptions): Promise<Omit<SnapshotFrame, 'type'>>;
  regenerate(messageId?: string, extra?: BranchOptions, options?: SendOptions): Promise<RunAck>;
  edit(messageId: string, message: { role: string; content?: unknown; id?: string; [field: string]: unknown }, extra?: BranchOptions, options?: SendOptions): Promise<RunAck>;
  /** One page of the run tree. */
  runs(page?: { cursor?: number; limit?: number; signal?: AbortSignal }): Promise<RunTree>;
  /** Every page of the run tree. */
  allRuns(options?: CallOptions): Promise<RunTree>;
}

/** Folds one AG-UI event into a `{messages, state}` view (what
 *  ThreadSession does after every event); returns the new view. */
export declare function foldEvent<S = unknown>(view: { messages: AgUiMessage[]; state: S }, event: AgUiEvent | { type: string; [field: string]: unknown }): { messages: AgUiMessage[]; state: S };
/** RFC 6902 JSON Patch applied to a copy of `doc`. */
export declare function applyPatch<T = unknown>(doc: T, patch: readonly { op: string; path: string; from?: string; value?: unknown }[]): T;

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
