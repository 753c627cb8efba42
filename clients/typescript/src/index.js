// @agui-gateway/client — the gateway's WebSocket protocol (docs/protocol.md)
// as a connection and thread sessions.
//
// This file has no imports on purpose: it is the whole of what a page needs
// to speak the protocol, so the gateway serves it as it is (the inspector
// loads it as a plain ES module, no bundler, no build step). The
// `@ag-ui/client` integration (GatewayAgent, the folded view) lives in
// `./agent.js`, which imports this file.

/**
 * The protocol's shapes in one place: what each command and reply carries
 * (`?` = optional), the error codes and the close codes. test/static.mjs
 * compares this with docs/protocol.md and docs/ws-protocol.schema.json, so
 * neither can drift from the client.
 */
export const PROTOCOL = Object.freeze({
  subprotocol: 'agui-gateway.v1',
  commands: {
    auth: ['token'],
    run: ['agent?', 'threadId', 'runId?', 'parentRunId?', 'strategy?', 'messages?', 'tools?', 'context?', 'state?', 'forwardedProps?'],
    regenerate: ['threadId', 'messageId?', 'agent?', 'runId?', 'strategy?', 'tools?', 'context?', 'state?', 'forwardedProps?'],
    edit: ['threadId', 'messageId', 'message', 'agent?', 'runId?', 'strategy?', 'tools?', 'context?', 'state?', 'forwardedProps?'],
    resume: ['threadId', 'resume', 'agent?', 'runId?', 'messages?', 'tools?', 'context?', 'forwardedProps?'],
    cancel: ['threadId', 'runId?'],
    switch: ['threadId', 'agent'],
    subscribe: ['threadId', 'after?', 'epoch?', 'presence?'],
    unsubscribe: ['threadId'],
    meta: ['threadId', 'metaType', 'payload', 'clientEventId?'],
    composing: ['threadId', 'composing?'],
    ping: [],
  },
  replies: {
    event: ['threadId', 'seq', 'event'],
    snapshot: ['threadId', 'seq', 'messages', 'state', 'run', 'headRunId', 'activeAgent', 'activeAgentBy?', 'interrupts', 'meta?', 'reset?'],
    ack: ['id', 'threadId?', 'runId?'],
    error: ['id?', 'code', 'message'],
    pong: ['id?'],
    presence: ['threadId', 'joined', 'left', 'viewers', 'composing'],
  },
  /** Fields the contract's "Extensions" section adds to replies. */
  replyExtensions: {
    ack: ['queued?', 'eventId?', 'duplicate?', 'epoch?', 'presence?', 'lapseMs?'],
    snapshot: ['epoch?'],
    error: ['retryAfter?', 'threadId?', 'runId?'],
  },
  errorCodes: ['unauthenticated', 'forbidden', 'not_found', 'invalid', 'conflict', 'rate_limited', 'too_large', 'unavailable', 'internal'],
  closeCodes: {
    4001: 'unauthenticated or token expired',
    4003: 'forbidden origin',
    4008: 'unread control replies overflowed the queue',
    4009: 'protocol violation',
    1001: 'gateway shutting down',
    1009: 'frame too large',
    1002: 'frame breaks RFC 6455',
    1007: 'text frame is not UTF-8',
    1008: 'a connection limit',
  },
});

/** The kinds of run a thread's tree records (docs/protocol.md "Branches"). */
export const RUN_KINDS = Object.freeze(['continue', 'branch', 'regenerate', 'edit', 'resume', 'handoff']);

/** Commands that start a run (and subscribe the connection to its thread). */
const STARTS_RUN = new Set(['run', 'resume', 'regenerate', 'edit']);

/** Codes this client gives errors that never reached the gateway. */
export const CLIENT_ERROR_CODES = Object.freeze(['disconnected', 'closed', 'timeout', 'aborted']);

/** Gateway answers that mean "not done, try again later": nothing ran, so
 *  sending the same request again is safe. */
const RETRYABLE_CODES = new Set(['rate_limited', 'unavailable']);

/** The error an aborted call rejects with (the signal's reason as `cause`). */
function abortError(signal) {
  const error = new GatewayError('aborted', 'the call was aborted by its AbortSignal');
  error.cause = signal?.reason;
  return error;
}

/**
 * `promise`, or a rejection with an `aborted` GatewayError as soon as
 * `signal` aborts (`onAbort` runs then, to drop what waits). An aborted
 * signal rejects at once.
 */
function abortable(promise, signal, onAbort) {
  if (!signal) return promise;
  if (signal.aborted) {
    onAbort?.();
    return Promise.reject(abortError(signal));
  }
  return new Promise((resolve, reject) => {
    const abort = () => {
      onAbort?.();
      reject(abortError(signal));
    };
    signal.addEventListener('abort', abort, { once: true });
    promise.then(
      (v) => { signal.removeEventListener('abort', abort); resolve(v); },
      (e) => { signal.removeEventListener('abort', abort); reject(e); },
    );
  });
}

/** Waits `ms` (rejects with `aborted` when `signal` aborts first). */
function delay(ms, signal) {
  let timer;
  return abortable(new Promise((resolve) => { timer = setTimeout(resolve, ms); }), signal, () => clearTimeout(timer));
}

/**
 * An error with the contract's stable `code` (one of PROTOCOL.errorCodes),
 * or one of CLIENT_ERROR_CODES when the gateway never answered.
 */
export class GatewayError extends Error {
  constructor(code, message, details = {}) {
    super(message || code);
    this.name = 'GatewayError';
    this.code = code;
    if (details.retryAfter !== undefined) this.retryAfter = details.retryAfter;
    if (details.closeCode !== undefined) this.closeCode = details.closeCode;
    if (details.threadId !== undefined) this.threadId = details.threadId;
    if (details.runId !== undefined) this.runId = details.runId;
    if (details.status !== undefined) this.status = details.status;
  }

  /** The error an `error` frame (or an HTTP error body's `error`) says. */
  static from(body, extra = {}) {
    return new GatewayError(body.code || 'internal', body.message || '', { ...body, ...extra });
  }
}

/** The claims of a JWT (unverified: only to plan the refresh), or null. */
export function tokenClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const bytes = atob(part + '='.repeat((4 - (part.length % 4)) % 4));
    return JSON.parse(decodeURIComponent(escape(bytes)));
  } catch {
    return null;
  }
}

/** A tiny listener registry (EventTarget carries no typed payloads in Node 20). */
class Emitter {
  #listeners = new Map();

  /** Calls `fn` for every `type` emitted; returns the function that stops it. */
  on(type, fn) {
    if (!this.#listeners.has(type)) this.#listeners.set(type, new Set());
    this.#listeners.get(type).add(fn);
    return () => this.off(type, fn);
  }

  off(type, fn) {
    this.#listeners.get(type)?.delete(fn);
  }

  emit(type, value) {
    for (const fn of [...(this.#listeners.get(type) || [])]) {
      try {
        fn(value);
      } catch (e) {
        // A listener's bug must not stop the protocol.
        queueMicrotask(() => { throw e; });
      }
    }
  }
}

const OPEN = 1;

/**
 * One authenticated WebSocket to the gateway, kept open: the token comes
 * from a provider (asked again before it expires, and after a 4001), a lost
 * socket is reopened with exponential backoff and jitter, a silent one is
 * found by ping, commands are matched to their answers by `id`, and every
 * thread session is resubscribed after its last seen seq.
 */
export class GatewayConnection extends Emitter {
  constructor(options) {
    super();
    if (!options || !options.url) throw new TypeError('GatewayConnection: `url` is required');
    if (options.token === undefined) throw new TypeError('GatewayConnection: `token` (a string or a provider) is required');
    this.url = wsUrl(options.url);
    this.httpBase = httpBase(options.url);
    this.WebSocket = options.WebSocket || globalThis.WebSocket;
    if (!this.WebSocket) {
      throw new TypeError('GatewayConnection: no global WebSocket; pass `WebSocket` (e.g. the `ws` package in Node < 22)');
    }
    this.fetch = options.fetch || ((...a) => globalThis.fetch(...a));
    this.tokenProvider = typeof options.token === 'function' ? options.token : () => options.token;
    const r = options.reconnect || {};
    this.backoff = {
      initial: r.initialDelayMs ?? 250,
      max: r.maxDelayMs ?? 10_000,
      factor: r.factor ?? 2,
      jitter: r.jitter ?? 0.3,
    };
    const q = options.retry || {};
    /** Retries of requests the gateway did not carry out (see #retrying). */
    this.retry = {
      attempts: q.attempts ?? 0,
      initial: q.initialDelayMs ?? 250,
      max: q.maxDelayMs ?? 5_000,
      factor: q.factor ?? 2,
    };
    this.pingIntervalMs = options.pingIntervalMs ?? 15_000;
    this.pingTimeoutMs = options.pingTimeoutMs ?? 10_000;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    this.refreshLeadMs = options.refreshLeadMs ?? 30_000;
    this.autoRefresh = options.autoRefresh ?? true;
    /** 'idle' | 'connecting' | 'open' | 'reconnecting' | 'closed' */
    this.state = 'idle';
    this.token = null;
    this.sessions = new Map();
    this.pending = new Map();
    this.nextId = 1;
    this.attempt = 0;
    this.ws = null;
    this.timers = { retry: null, ping: null, pong: null, refresh: null };
    this.rejected = false;
    this.opened = null;
    /** Bumped by close(): an open still waiting for its token when the
     *  connection was closed (and perhaps connected again) gives up. */
    this.generation = 0;
  }

  /** Opens the connection; resolves once authenticated (the first time).
   *  `signal` stops the waiting (the connection keeps trying). */
  connect({ signal } = {}) {
    if (this.state === 'open') return Promise.resolve();
    if (signal) return abortable(this.connect(), signal);
    if (!this.opened) {
      this.opened = {};
      this.opened.promise = new Promise((resolve, reject) => Object.assign(this.opened, { resolve, reject }));
    }
    if (this.state === 'idle' || this.state === 'closed') {
      this.rejected = false;
      this.#open('connecting');
    }
    return this.opened.promise;
  }

  /** True while authenticated and able to send. */
  get isOpen() {
    return this.state === 'open';
  }

  #setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.emit('state', state);
  }

  async #open(state) {
    this.#setState(state);
    const generation = this.generation;
    let token;
    try {
      token = await this.tokenProvider({ reason: this.rejected ? 'rejected' : this.token ? 'reconnect' : 'initial', previous: this.token });
    } catch (e) {
      return this.#fail(new GatewayError('unauthenticated', `the token provider failed: ${e?.message || e}`));
    }
    // Closed meanwhile — and maybe connected again (React's StrictMode
    // mounts twice): that newer open owns the connection; this one would
    // leave a second socket open and authenticated.
    if (this.state === 'closed' || generation !== this.generation) return;
    if (!token || (this.rejected && token === this.token)) {
      return this.#fail(new GatewayError('unauthenticated', this.rejectReason || 'no token', { closeCode: 4001 }));
    }
    this.token = token;
    let ws;
    try {
      ws = new this.WebSocket(this.url, [PROTOCOL.subprotocol]);
    } catch (e) {
      return this.#scheduleRetry(`cannot open: ${e?.message || e}`);
    }
    this.ws = ws;
    let authenticated = false;
    // One auth per socket, and frames of an older socket are ignored: a fixed id.
    const authId = 'auth';
    ws.onopen = () => {
      // The token travels in the first frame, never in the URL.
      ws.send(JSON.stringify({ type: 'auth', token, id: authId }));
    };
    ws.onmessage = (message) => {
      if (this.ws !== ws) return;
      let frame;
      try {
        frame = JSON.parse(typeof message.data === 'string' ? message.data : String(message.data));
      } catch {
        return;
      }
      if (!authenticated && frame.id === authId) {
        if (frame.type === 'ack') {
          authenticated = true;
          this.#authenticated(token);
        } else if (frame.type === 'error') {
          this.lastError = GatewayError.from(frame);
        }
        return;
      }
      this.#frame(frame);
    };
    ws.onclose = (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.#closed(event.code, event.reason || '', authenticated);
    };
    ws.onerror = () => {};
  }

  #authenticated(token) {
    this.attempt = 0;
    this.rejected = false;
    this.rejectReason = undefined;
    this.#setState('open');
    this.#planRefresh(token);
    this.#ping();
    this.emit('open');
    if (this.opened) {
      this.opened.resolve();
      this.opened = null;
    }
    for (const session of this.sessions.values()) session._connected();
  }

  #closed(code, reason, wasOpen) {
    this.#clearTimers();
    for (const [, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new GatewayError('disconnected', 'the connection dropped before the gateway answered'));
    }
    this.pending.clear();
    if (this.state === 'closed') return;
    for (const session of this.sessions.values()) session._disconnected();
    if (code === 4001) {
      // Expired or refused: ask the provider for a fresh token once; the same
      // token again (or none) ends the connection.
      this.rejected = true;
      this.rejectReason = reason || 'unauthenticated';
    }
    if (code === 4003 || code === 1008) {
      const error = new GatewayError(code === 4003 ? 'forbidden' : (this.lastError?.code || 'rate_limited'), reason || this.lastError?.message || '', { closeCode: code, retryAfter: this.lastError?.retryAfter });
      if (code === 4003) return this.#fail(error);
    }
    this.emit('close', { code, reason, wasOpen });
    this.#scheduleRetry(reason);
  }

  #scheduleRetry(reason) {
    if (this.state === 'closed') return;
    this.#setState('reconnecting');
    const { initial, max, factor, jitter } = this.backoff;
    const base = Math.min(max, initial * factor ** this.attempt);
    const delay = Math.max(0, base * (1 - jitter + Math.random() * 2 * jitter));
    this.attempt += 1;
    this.emit('retry', { delayMs: delay, attempt: this.attempt, reason });
    this.timers.retry = setTimeout(() => this.#open('reconnecting'), delay);
  }

  #fail(error) {
    this.#clearTimers();
    this.#setState('closed');
    this.emit('error', error);
    this.emit('close', { code: error.closeCode ?? 1000, reason: error.message, wasOpen: false, error });
    if (this.opened) {
      this.opened.reject(error);
      this.opened = null;
    }
    const ws = this.ws;
    this.ws = null;
    try { ws?.close(1000); } catch { /* already closing */ }
  }

  #clearTimers() {
    for (const key of Object.keys(this.timers)) {
      clearTimeout(this.timers[key]);
      this.timers[key] = null;
    }
  }

  /** Sends a fresh token from the provider a little before this one expires. */
  #planRefresh(token) {
    clearTimeout(this.timers.refresh);
    if (!this.autoRefresh) return;
    const exp = tokenClaims(token)?.exp;
    if (!exp) return;
    const left = exp * 1000 - Date.now();
    const lead = Math.min(this.refreshLeadMs, left / 2);
    this.timers.refresh = setTimeout(() => this.#refresh(), Math.max(0, left - lead));
  }

  async #refresh() {
    try {
      const token = await this.tokenProvider({ reason: 'expiring', previous: this.token });
      if (!token || token === this.token) return;
      await this.authenticate(token);
    } catch (e) {
      this.emit('error', e instanceof GatewayError ? e : new GatewayError('unauthenticated', String(e?.message || e)));
    }
  }

  /** Sends `token` as an `auth` frame on the open socket (a refresh: nothing
   *  reconnects); later reconnects use the provider as before. */
  async authenticate(token) {
    await this.send({ type: 'auth', token });
    this.token = token;
    this.#planRefresh(token);
    this.emit('token', token);
  }

  #ping() {
    clearTimeout(this.timers.ping);
    if (!this.pingIntervalMs) return;
    this.timers.ping = setTimeout(() => {
      const ws = this.ws;
      if (!ws || this.state !== 'open') return;
      const id = `ping-${this.nextId++}`;
      this.timers.pong = setTimeout(() => {
        // No answer: the socket is dead without knowing it. Reconnect.
        if (this.ws === ws) {
          this.ws = null;
          try { ws.close(4000, 'no pong'); } catch { /* gone */ }
          this.#closed(1006, 'no pong within pingTimeoutMs', true);
        }
      }, this.pingTimeoutMs);
      this.pending.set(id, {
        resolve: () => { clearTimeout(this.timers.pong); this.#ping(); },
        reject: () => clearTimeout(this.timers.pong),
        timer: null,
      });
      ws.send(JSON.stringify({ type: 'ping', id }));
    }, this.pingIntervalMs);
  }

  /**
   * Sends a command; resolves with its `ack` (or `pong`), rejects with a
   * GatewayError carrying the `error` frame's code. Not connected:
   * rejects at once with `disconnected`.
   */
  send(command, options = {}) {
    const once = () => this.#sendOnce(command, options.signal);
    return this.#retrying(once, options, (e) => RETRYABLE_CODES.has(e.code) || e.notSent === true);
  }

  /**
   * Runs `attempt` again, with exponential backoff (a `retryAfter` the
   * gateway names wins), while `retryable(error)` says the gateway did not
   * carry the request out, up to `retry.attempts` more times (the
   * connection's `retry` option, or the call's own `retry`). A command sent
   * while the socket is down is retried once it is back: it never left.
   */
  async #retrying(attempt, { signal, retry } = {}, retryable) {
    const policy = { ...this.retry, ...(retry ? renameRetry(retry) : {}) };
    for (let n = 0; ; n += 1) {
      try {
        return await attempt();
      } catch (e) {
        if (!(e instanceof GatewayError) || n >= policy.attempts || !retryable(e)) throw e;
        const backoff = Math.min(policy.max, policy.initial * policy.factor ** n);
        const wait = e.retryAfter != null ? Math.max(backoff, e.retryAfter * 1000) : backoff;
        if (e.notSent && this.state !== 'closed') await abortable(this.#whenOpen(), signal);
        else await delay(wait, signal);
      }
    }
  }

  /** Resolves when a socket is next authenticated (at once when one is; a
   *  socket already closing but not yet reported is not), or on close(). */
  #whenOpen() {
    if (this.state === 'open' && this.ws?.readyState === OPEN) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => { stopOpen(); stopState(); resolve(); };
      const stopOpen = this.on('open', done);
      const stopState = this.on('state', (s) => { if (s === 'closed') done(); });
    });
  }

  #sendOnce(command, signal) {
    if (signal?.aborted) return Promise.reject(abortError(signal));
    const id = command.id ?? `c${this.nextId++}`;
    const frame = { ...command, id };
    // A run or resume subscribes the connection to its thread: its session
    // (if any) is resubscribed after a reconnect from then on.
    const session = STARTS_RUN.has(command.type) ? this.sessions.get(command.threadId) : undefined;
    session?._joinedByRun();
    const acked = new Promise((resolve, reject) => {
      const ws = this.ws;
      if (this.state !== 'open' || !ws || ws.readyState !== OPEN) {
        const error = new GatewayError(this.state === 'closed' ? 'closed' : 'disconnected', 'not connected; the connection reconnects by itself');
        // Never left this process: safe to send again once reconnected.
        if (this.state !== 'closed') error.notSent = true;
        reject(error);
        return;
      }
      const timer = this.requestTimeoutMs
        ? setTimeout(() => {
          this.pending.delete(id);
          reject(new GatewayError('timeout', `no answer to '${command.type}' within ${this.requestTimeoutMs} ms`));
        }, this.requestTimeoutMs)
        : null;
      this.pending.set(id, { resolve, reject, timer });
      ws.send(JSON.stringify(frame));
    });
    // Aborting stops the waiting, not the command: a run that was sent runs
    // (cancel() stops it); its answer is dropped when it comes.
    const waited = abortable(acked, signal, () => {
      const p = this.pending.get(id);
      if (p) clearTimeout(p.timer);
      this.pending.delete(id);
    });
    // A run's ack names the epoch of the seqs its events carry.
    return session ? waited.then((ack) => { session._learnEpoch(ack); return ack; }) : waited;
  }

  #frame(frame) {
    this.emit('frame', frame);
    const waiting = frame.id !== undefined && frame.id !== null ? this.pending.get(frame.id) : undefined;
    // A subscribe's list, taken before its snapshot is (which may come in
    // the same read, ahead of the ack's promise callbacks).
    if (frame.type === 'ack' && Array.isArray(frame.presence)) this.sessions.get(frame.threadId)?._presenceList(frame.presence);
    if (waiting && (frame.type === 'ack' || frame.type === 'error' || frame.type === 'pong')) {
      this.pending.delete(frame.id);
      clearTimeout(waiting.timer);
      if (frame.type === 'error') waiting.reject(GatewayError.from(frame));
      else waiting.resolve(frame);
      return;
    }
    const session = frame.threadId !== undefined ? this.sessions.get(frame.threadId) : undefined;
    if (frame.type === 'event' || frame.type === 'snapshot') {
      session?._frame(frame);
      return;
    }
    if (frame.type === 'presence') {
      session?._presence(frame);
      return;
    }
    if (frame.type === 'error') {
      const error = GatewayError.from(frame);
      if (session) session.emit('error', error);
      else this.emit('error', error);
    }
  }

  /** The session for `threadId` on this connection (one per thread). */
  session(threadId) {
    let session = this.sessions.get(threadId);
    if (!session) {
      session = new ThreadSession(this, threadId);
      this.sessions.set(threadId, session);
    }
    return session;
  }

  /** A JSON HTTP request to the gateway with the current token; an error
   *  answer rejects with its contract code. */
  request(path, init = {}, options = {}) {
    const method = (init.method || 'GET').toUpperCase();
    const safe = method === 'GET' || method === 'HEAD';
    // Refused before anything was done (429, 503) is retryable for every
    // method; a lost answer only for a read.
    const retryable = (e) => RETRYABLE_CODES.has(e.code) || (safe && e.code === 'disconnected');
    return this.#retrying(() => this.#requestOnce(path, init), { signal: init.signal ?? undefined, retry: options.retry }, retryable);
  }

  async #requestOnce(path, init) {
    const token = this.token ?? await this.tokenProvider({ reason: 'initial' });
    let response;
    try {
      response = await this.fetch(`${this.httpBase}${path}`, {
        ...init,
        headers: { accept: 'application/json', ...(init.body ? { 'content-type': 'application/json' } : {}), ...init.headers, authorization: `Bearer ${token}` },
      });
    } catch (e) {
      if (init.signal?.aborted) throw abortError(init.signal);
      throw new GatewayError('disconnected', `the request failed: ${e?.message || e}`);
    }
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const retryAfter = Number(response.headers?.get?.('retry-after'));
      const extra = { status: response.status, ...(Number.isFinite(retryAfter) && retryAfter > 0 ? { retryAfter } : {}) };
      throw GatewayError.from(body.error || { code: 'internal', message: `HTTP ${response.status}` }, extra);
    }
    return body;
  }

  /** Closes cleanly (1000); nothing reconnects and waiting commands reject with `closed`. */
  close() {
    this.generation += 1;
    this.#clearTimers();
    this.#setState('closed');
    const ws = this.ws;
    this.ws = null;
    for (const [, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new GatewayError('closed', 'the connection was closed'));
    }
    this.pending.clear();
    if (this.opened) {
      this.opened.reject(new GatewayError('closed', 'the connection was closed'));
      this.opened = null;
    }
    try { ws?.close(1000, 'client closed'); } catch { /* already closing */ }
    this.emit('close', { code: 1000, reason: 'client closed', wasOpen: true });
  }
}

/**
 * One thread as seen through a connection: a snapshot, then live events,
 * each seq once and in order across any reconnect (resubscribed `after` the
 * last seq seen; a `reset` snapshot replaces everything). It keeps the
 * thread's view live — `messages` and `state` folded after every event
 * (foldEvent), `seq`, `latestRun`, `headRunId`, pending `interrupts` — so
 * whoever started a run sees its answer without a second fold.
 * GatewayAgent (`./agent.js`) folds with @ag-ui/client's own machinery
 * instead, for AG-UI frontends.
 */
export class ThreadSession extends Emitter {
  constructor(connection, threadId) {
    super();
    this.connection = connection;
    this.threadId = threadId;
    /** The last seq applied (null before the first snapshot). */
    this.seq = null;
    /** The epoch of the history `seq` belongs to (docs/protocol.md,
     *  "Cursors"), as the gateway's acks name it; null when it names none
     *  (a local store, or a thread not written yet). Sent back with `seq`
     *  on every resubscribe, so a cursor into a history the store lost is
     *  answered with a reset snapshot, never the new history spliced on. */
    this.epoch = null;
    this.messages = [];
    this.state = {};
    /** `{runId, agent, status, parentRunId, kind}` of the thread's latest
     *  run, or null. */
    this.latestRun = null;
    /** The thread's head (the newest run started: what the next plain run
     *  continues from and what the live view shows), or null. */
    this.headRunId = null;
    /** The agent speaking on the thread (moved by a handoff or a switch;
     *  where a run that names no agent goes when it is sticky), or null. */
    this.activeAgent = null;
    this.interrupts = [];
    /** Who is watching, by user id (the subscribe ack's list, then `presence` frames). */
    this.watchers = new Map();
    this.wanted = false;
    this.joinedByRun = false;
    this.ready = null;
    this.readyWaiters = [];
    /** Open `events()` iterators. */
    this.iterators = new Set();
  }

  /** Subscribes: resolves once the snapshot (or the catch-up) is in. */
  subscribe({ signal } = {}) {
    this.wanted = true;
    if (this.connection.isOpen) this.#send();
    return this.whenReady({ signal });
  }

  /** Resolves when a snapshot has been applied (at once when it has). */
  whenReady({ signal } = {}) {
    if (this.seq !== null && this.ready) return Promise.resolve();
    const waiter = {};
    const ready = new Promise((resolve, reject) => Object.assign(waiter, { resolve, reject }));
    this.readyWaiters.push(waiter);
    return abortable(ready, signal, () => { this.readyWaiters = this.readyWaiters.filter((w) => w !== waiter); });
  }

  #send() {
    // `presence`: told who joins and leaves (viewers(), the `presence` event).
    const frame = { type: 'subscribe', threadId: this.threadId, presence: true };
    // After a reconnect: every event after the last one seen, nothing twice.
    if (this.seq !== null) {
      frame.after = this.seq;
      if (this.epoch !== null) frame.epoch = this.epoch;
    }
    this.connection.send(frame).then((ack) => {
      this._learnEpoch(ack);
      if (this.seq !== null) this.#markReady();
    }, (e) => {
      if (e.code === 'disconnected' || e.code === 'closed') return;
      // A run sent meanwhile (the thread did not exist yet) still watches it.
      this.wanted = this.joinedByRun;
      const waiting = this.readyWaiters.splice(0);
      for (const w of waiting) w.reject(e);
      // Told to whoever waits for it; otherwise to the session's listeners.
      if (!waiting.length) this.emit('error', e);
    });
  }

  #markReady() {
    this.ready = true;
    for (const w of this.readyWaiters.splice(0)) w.resolve();
  }

  /** Who is watching the thread now, on every node (one entry per person). */
  viewers() {
    return [...this.watchers.values()];
  }

  _presenceList(list) {
    this.watchers = new Map(list.map((w) => [w.userId, w]));
  }

  _presence(frame) {
    this._presenceList(frame.viewers || []);
    this.emit('presence', { joined: frame.joined || [], left: frame.left || [], viewers: this.viewers(), composing: frame.composing || [] });
  }

  /** Keeps the epoch an ack names (the seqs that follow it are of it). */
  _learnEpoch(ack) {
    if (ack && typeof ack.epoch === 'string') this.epoch = ack.epoch;
  }

  _joinedByRun() {
    this.wanted = true;
    this.joinedByRun = true;
  }

  _connected() {
    if (this.wanted) this.#send();
  }

  _disconnected() {
    this.ready = false;
  }

  /** Drops what it has and subscribes again from a fresh snapshot. */
  resync() {
    this.seq = null;
    this.epoch = null;
    this.ready = false;
    if (this.wanted && this.connection.isOpen) this.#send();
  }

  /** Stops watching the thread. */
  async unsubscribe({ signal } = {}) {
    this.wanted = false;
    this.watchers = new Map();
    this.joinedByRun = false;
    this.ready = false;
    if (this.connection.isOpen) await this.connection.send({ type: 'unsubscribe', threadId: this.threadId }, { signal });
  }

  /** Unsubscribes and leaves the connection: the next `session(threadId)`
   *  starts afresh (a new snapshot). */
  close() {
    if (this.connection.sessions.get(this.threadId) === this) this.connection.sessions.delete(this.threadId);
    for (const q of [...this.iterators]) q.end();
    return this.unsubscribe().catch(() => {});
  }

  _frame(frame) {
    if (frame.type === 'snapshot') {
      const previous = this.seq;
      this.seq = frame.seq;
      // A reset after the store lost history: the acks so far named the
      // lost one (a snapshot that names its epoch says which it is).
      if (typeof frame.epoch === 'string') this.epoch = frame.epoch;
      else if (frame.reset) this.epoch = null;
      this.messages = frame.messages || [];
      this.state = frame.state ?? {};
      this.latestRun = frame.run ?? null;
      this.headRunId = frame.headRunId ?? frame.run?.runId ?? null;
      this.activeAgent = frame.activeAgent ?? null;
      this.interrupts = frame.interrupts || [];
      if (frame.reset) this.emit('reset', { previousSeq: previous, snapshot: frame });
      this.emit('snapshot', frame);
      this.#markReady();
      return;
    }
    if (this.seq !== null && frame.seq <= this.seq) return; // seen already
    if (this.seq !== null && frame.seq !== this.seq + 1) {
      // Cannot happen with the contract; if it does, ask again from what we have.
      this.emit('gap', { expected: this.seq + 1, got: frame.seq });
      if (this.connection.isOpen) this.#send();
      return;
    }
    this.seq = frame.seq;
    const event = frame.event;
    ({ messages: this.messages, state: this.state } = foldEvent({ messages: this.messages, state: this.state }, event));
    switch (event.type) {
      case 'RUN_STARTED': {
        // The gateway stamps every run's base and kind (docs/protocol.md
        // "Branches"); a linear run's base is the head it continued.
        const stamp = event['agui-gateway'] || {};
        // An explicit null (a fork of the thread's first run has no base)
        // is an answer, not a missing one: only an absent field falls back.
        const parentRunId = event.parentRunId !== undefined ? event.parentRunId
          : stamp.parentRunId !== undefined ? stamp.parentRunId
            : this.headRunId ?? null;
        this.latestRun = { runId: event.runId, agent: stamp.agent ?? this.latestRun?.agent ?? null, status: 'running', parentRunId, kind: stamp.kind ?? 'continue', startedBy: stamp.by ?? null };
        this.headRunId = event.runId;
        this.interrupts = [];
        // A handoff's run speaks once its record says the handoff took place.
        if (stamp.agent && stamp.kind !== 'handoff') this.activeAgent = stamp.agent;
        break;
      }
      case 'CUSTOM': {
        const value = event.value || {};
        if (event.name === 'agui-gateway/handoff' && value.result === 'accepted') this.activeAgent = value.toAgent ?? this.activeAgent;
        if (event.name === 'agui-gateway/active-agent') this.activeAgent = value.agent ?? this.activeAgent;
        break;
      }
      case 'RUN_FINISHED': {
        const outcome = event.outcome?.type;
        const status = outcome === 'interrupt' ? 'interrupted' : outcome === 'cancelled' ? 'cancelled' : 'finished';
        this.latestRun = { ...(this.latestRun || { agent: null }), runId: event.runId, status };
        this.interrupts = outcome === 'interrupt' ? event.outcome.interrupts || [] : [];
        break;
      }
      case 'RUN_ERROR':
        this.latestRun = { ...(this.latestRun || { runId: null, agent: null }), status: 'error' };
        break;
      default:
    }
    this.emit('event', { seq: frame.seq, event });
    for (const q of this.iterators) q.push({ seq: frame.seq, event });
  }

  /**
   * The thread's events from now on as an async iterator (`for await (const
   * {seq, event} of session.events())`), each seq once and in order across
   * reconnects, buffered while the loop body awaits. It ends when `signal`
   * aborts, the loop breaks, or the session closes.
   */
  events({ signal } = {}) {
    const buffer = [];
    let wake = null;
    let done = false;
    const finish = () => {
      done = true;
      this.iterators.delete(queue);
      signal?.removeEventListener('abort', finish);
      wake?.();
    };
    const queue = { push: (item) => { buffer.push(item); wake?.(); }, end: finish };
    this.iterators.add(queue);
    if (signal?.aborted) finish();
    else signal?.addEventListener('abort', finish, { once: true });
    return {
      [Symbol.asyncIterator]() { return this; },
      next: async () => {
        while (!buffer.length && !done) await new Promise((resolve) => { wake = resolve; });
        wake = null;
        return buffer.length ? { value: buffer.shift(), done: false } : { value: undefined, done: true };
      },
      return: async () => { finish(); buffer.length = 0; return { value: undefined, done: true }; },
    };
  }

  /**
   * Resolves with the event that ends run `runId` (RUN_FINISHED or
   * RUN_ERROR) once this session has seen it.
   */
  runEnded(runId, { signal } = {}) {
    let stop;
    const ended = new Promise((resolve) => {
      stop = this.on('event', ({ event }) => {
        if ((event.type === 'RUN_FINISHED' && event.runId === runId) || (event.type === 'RUN_ERROR' && this.latestRun?.runId === runId)) {
          stop();
          resolve(event);
        }
      });
    });
    return abortable(ended, signal, stop);
  }

  /** `run`: new messages for the thread's agent; resolves with the ack.
   *  The connection watches the thread from then on (resubscribed after a
   *  reconnect like a subscription). */
  run(params, options) {
    return this.connection.send({ ...params, type: 'run', threadId: this.threadId }, options);
  }

  /** `resume`: answers every pending interrupt (`ResumeEntry[]`). */
  resume(resume, extra = {}, options) {
    return this.connection.send({ ...extra, type: 'resume', threadId: this.threadId, resume }, options);
  }

  /** `cancel`: stops the active run (or run `runId`). */
  cancel(runId, options) {
    return this.connection.send({ type: 'cancel', threadId: this.threadId, ...(runId ? { runId } : {}) }, options);
  }

  /** `switch`: the thread's next plain run (a `run` without `agent`) goes
   *  to `agent`; resolves with the ack (`{threadId, agent, seq}`). */
  switchAgent(agent, options) {
    return this.connection.send({ type: 'switch', threadId: this.threadId, agent }, options);
  }

  /** `composing`: this person is typing in the thread (`on`, the default)
   *  or stopped (`false`: call it when the text is sent or cleared). Call it
   *  on every keystroke: a repeat is sent only once half the signal's life
   *  (the gateway's `lapseMs`) has gone by, so typing costs a frame every
   *  few seconds. Resolves with the ack, or null when nothing was sent. */
  composing(on = true, options) {
    const now = Date.now();
    if (on && this._composingUntil && now < this._composingUntil) return Promise.resolve(null);
    this._composingUntil = on ? now + 1000 : 0;
    return this.connection.send({ type: 'composing', threadId: this.threadId, composing: on }, options).then((ack) => {
      if (on && this._composingUntil) this._composingUntil = now + Math.max(250, (ack?.lapseMs ?? 2000) / 2);
      return ack;
    }, (e) => {
      this._composingUntil = 0;
      throw e;
    });
  }

  /** `meta`: a META event; idempotent per `clientEventId`. */
  meta(metaType, payload, clientEventId, options) {
    return this.connection.send({ type: 'meta', threadId: this.threadId, metaType, payload, ...(clientEventId ? { clientEventId } : {}) }, options);
  }

  /** The thread's snapshot over HTTP (`GET /v1/threads/{id}`); with
   *  `runId`: the conversation as it was at the end of that run. */
  fetchSnapshot(runId, { signal } = {}) {
    return this.connection.request(`/v1/threads/${encodeURIComponent(this.threadId)}${runId ? `?runId=${encodeURIComponent(runId)}` : ''}`, { signal });
  }

  // ----- branches (docs/protocol.md "Branches") -----

  /** `regenerate`: answers again — a run that is a sibling of the run that
   *  produced `messageId` (default: the head's last assistant message; a
   *  user message id regenerates the answer to it). `extra`: `agent`,
   *  `runId`, `strategy`, `tools`, `context`, `state`, `forwardedProps`.
   *  Resolves with the ack (its `runId`). */
  regenerate(messageId, extra = {}, options) {
    return this.connection.send({ ...extra, type: 'regenerate', threadId: this.threadId, ...(messageId ? { messageId } : {}) }, options);
  }

  /** `edit`: `message` (role `user`) replaces user message `messageId`
   *  (same id) on a sibling of the run that introduced it, and runs from
   *  there. Resolves with the ack (its `runId`). */
  edit(messageId, message, extra = {}, options) {
    return this.connection.send({ ...extra, type: 'edit', threadId: this.threadId, messageId, message: { ...message, id: messageId } }, options);
  }

  /** One page of the thread's run tree (`GET /v1/threads/{id}/runs`):
   *  `{threadId, headRunId, runs, nextCursor}`, oldest first; siblings
   *  share a `parentRunId`. */
  runs({ cursor, limit, signal } = {}) {
    const q = new URLSearchParams();
    if (cursor != null) q.set('cursor', String(cursor));
    if (limit) q.set('limit', String(limit));
    const query = q.toString();
    return this.connection.request(`/v1/threads/${encodeURIComponent(this.threadId)}/runs${query ? `?${query}` : ''}`, { signal });
  }

  /** The whole run tree: every page of `runs()`, `{headRunId, runs}`. */
  async allRuns({ signal } = {}) {
    const runs = [];
    let page = await this.runs({ signal });
    runs.push(...page.runs);
    while (page.nextCursor != null) {
      page = await this.runs({ cursor: page.nextCursor, signal });
      runs.push(...page.runs);
    }
    return { threadId: this.threadId, headRunId: page.headRunId, runs };
  }
}

/** The connection's `retry` option names as #retrying uses them. */
function renameRetry(r) {
  const out = {};
  if (r.attempts !== undefined) out.attempts = r.attempts;
  if (r.initialDelayMs !== undefined) out.initial = r.initialDelayMs;
  if (r.maxDelayMs !== undefined) out.max = r.maxDelayMs;
  if (r.factor !== undefined) out.factor = r.factor;
  return out;
}

/**
 * Folds one AG-UI event into `{messages, state}` the way AG-UI clients do
 * (@ag-ui/client's defaultApplyEvents, without its subscriber hooks), and
 * returns the new pair — new arrays and objects where something changed, so
 * a UI (React) sees the change by reference. A journaled MESSAGES_SNAPSHOT
 * is the gateway's own fold of the thread (a fork journals its branch's
 * history this way) and is taken exactly. Unknown event types change
 * nothing (they still reach `event` listeners).
 */
export function foldEvent(view, event) {
  let { messages, state } = view;
  const at = (id) => messages.findIndex((m) => m.id === id);
  const put = (message) => {
    const i = at(message.id);
    messages = i < 0 ? [...messages, message] : messages.map((m, j) => (j === i ? message : m));
  };
  const append = (id, role, delta) => {
    const i = at(id);
    const old = i < 0 ? { id, role, content: '' } : messages[i];
    put({ ...old, content: `${typeof old.content === 'string' ? old.content : ''}${delta ?? ''}` });
  };
  const holder = (toolCallId) => messages.find((m) => m.toolCalls?.some((c) => c.id === toolCallId));
  const startCall = (e) => {
    if (holder(e.toolCallId)) return;
    const parentId = e.parentMessageId ?? e.toolCallId;
    const i = at(parentId);
    const parent = i >= 0 && messages[i].role === 'assistant' ? messages[i] : { id: parentId, role: 'assistant', toolCalls: [] };
    put({ ...parent, toolCalls: [...(parent.toolCalls || []), { id: e.toolCallId, type: 'function', function: { name: e.toolCallName, arguments: '' } }] });
  };
  const callArgs = (toolCallId, delta) => {
    const m = holder(toolCallId);
    if (!m) return;
    put({ ...m, toolCalls: m.toolCalls.map((c) => (c.id === toolCallId ? { ...c, function: { ...c.function, arguments: c.function.arguments + (delta ?? '') } } : c)) });
  };
  switch (event.type) {
    case 'RUN_STARTED':
      for (const m of event.input?.messages || []) if (at(m.id) < 0) put(m);
      break;
    case 'MESSAGES_SNAPSHOT':
      messages = [...(event.messages || [])];
      break;
    case 'TEXT_MESSAGE_START':
      if (at(event.messageId) < 0) put({ id: event.messageId, role: event.role || 'assistant', content: '' });
      break;
    case 'TEXT_MESSAGE_CONTENT':
      append(event.messageId, 'assistant', event.delta);
      break;
    case 'TEXT_MESSAGE_CHUNK':
      if (event.messageId) append(event.messageId, event.role || 'assistant', event.delta);
      break;
    case 'REASONING_MESSAGE_START':
      if (at(event.messageId) < 0) put({ id: event.messageId, role: 'reasoning', content: '' });
      break;
    case 'REASONING_MESSAGE_CONTENT':
    case 'REASONING_MESSAGE_CHUNK':
      if (event.messageId) append(event.messageId, 'reasoning', event.delta);
      break;
    case 'TOOL_CALL_START':
      startCall(event);
      break;
    case 'TOOL_CALL_CHUNK':
      if (event.toolCallId && event.toolCallName) startCall(event);
      callArgs(event.toolCallId, event.delta);
      break;
    case 'TOOL_CALL_ARGS':
      callArgs(event.toolCallId, event.delta);
      break;
    case 'TOOL_CALL_RESULT':
      put({ id: event.messageId, role: event.role || 'tool', toolCallId: event.toolCallId, content: event.content });
      break;
    case 'ACTIVITY_SNAPSHOT':
      if (event.replace !== false || at(event.messageId) < 0) put({ id: event.messageId, role: 'activity', activityType: event.activityType, content: event.content });
      break;
    case 'ACTIVITY_DELTA': {
      const i = at(event.messageId);
      if (i >= 0) put({ ...messages[i], content: applyPatch(messages[i].content ?? {}, event.patch || []) });
      break;
    }
    case 'STATE_SNAPSHOT':
      state = event.snapshot;
      break;
    case 'STATE_DELTA':
      state = applyPatch(state ?? {}, event.delta || []);
      break;
    default:
  }
  return { messages, state };
}

/** RFC 6902 JSON Patch on a copy of `doc` (what STATE_DELTA carries). */
export function applyPatch(doc, patch) {
  let root = structuredClone(doc);
  const path = (p) => p.split('/').slice(1).map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'));
  const get = (keys) => keys.reduce((v, k) => (v == null ? undefined : v[k]), root);
  const set = (keys, value, insert) => {
    if (!keys.length) { root = value; return; }
    const parent = get(keys.slice(0, -1));
    const key = keys[keys.length - 1];
    if (Array.isArray(parent)) {
      const i = key === '-' ? parent.length : Number(key);
      parent.splice(i, insert ? 0 : 1, value);
    } else parent[key] = value;
  };
  const remove = (keys) => {
    const parent = get(keys.slice(0, -1));
    const key = keys[keys.length - 1];
    if (Array.isArray(parent)) parent.splice(Number(key), 1);
    else delete parent[key];
  };
  for (const op of patch) {
    const keys = path(op.path);
    switch (op.op) {
      case 'add': set(keys, structuredClone(op.value), true); break;
      case 'replace': set(keys, structuredClone(op.value), false); break;
      case 'remove': remove(keys); break;
      case 'move': { const v = get(path(op.from)); remove(path(op.from)); set(keys, v, true); break; }
      case 'copy': set(keys, structuredClone(get(path(op.from))), true); break;
      case 'test':
        if (JSON.stringify(get(keys)) !== JSON.stringify(op.value)) throw new GatewayError('invalid', `JSON Patch test failed at ${op.path}`);
        break;
      default:
    }
  }
  return root;
}

function wsUrl(url) {
  const u = new URL(url, globalThis.location?.href);
  if (u.protocol === 'http:') u.protocol = 'ws:';
  if (u.protocol === 'https:') u.protocol = 'wss:';
  if (u.pathname === '/' || u.pathname === '') u.pathname = '/v1/ws';
  return u.toString();
}

function httpBase(url) {
  const u = new URL(url, globalThis.location?.href);
  u.protocol = u.protocol === 'wss:' || u.protocol === 'https:' ? 'https:' : 'http:';
  return u.origin;
}

/**
 * A thread's SSE join stream read with the platform's own `EventSource`
 * (docs/protocol.md, "Join cursors"), for pages that want the plain AG-UI
 * stream rather than a WebSocket session. `EventSource` reconnects by itself
 * after a network drop (same URL and ticket, `Last-Event-ID`), but gives up
 * for good on any refusal — and a gateway that restarted has forgotten the
 * ticket (tickets live in one process). Then this trades the token for a new
 * ticket and opens the stream again with `lastEventId=` the last cursor it
 * got: the gateway continues exactly as after a reconnect (no second
 * `RUN_STARTED`, nothing repeated or missed), so a stock `@ag-ui/client`
 * fed the events never notices.
 *
 * @param {object} options `base` (the gateway's URL), `threadId`, `token`
 *   (a string, or a function returning one or a promise of one), `onEvent`
 *   (called with each event and its cursor, or null for events the gateway
 *   adds), `onError` (a failed ticket request; retried), `after` (a cursor
 *   to start after), `retryMs` (default 1000), `EventSource` and `fetch`
 *   (default: the platform's).
 * @returns {{close(): void, readonly lastEventId: string|null, readonly opens: number}}
 */
export function joinStream(options) {
  const ES = options.EventSource ?? globalThis.EventSource;
  const fetchFn = options.fetch ?? globalThis.fetch;
  if (!ES) throw new TypeError('joinStream: no EventSource (pass options.EventSource)');
  const base = String(options.base).replace(/\/$/, '');
  const path = `${base}/v1/threads/${encodeURIComponent(options.threadId)}`;
  let last = options.after ?? null;
  let source = null;
  let timer = null;
  let closed = false;
  let opens = 0;
  const retry = () => {
    if (!closed) timer = setTimeout(open, options.retryMs ?? 1000);
  };
  async function open() {
    if (closed) return;
    let ticket;
    try {
      const token = typeof options.token === 'function' ? await options.token() : options.token;
      const res = await fetchFn(`${path}/ticket`, { method: 'POST', headers: { Authorization: `Bearer ${token}` } });
      if (!res.ok) throw new GatewayError('ticket_refused', `ticket request answered ${res.status}`);
      ({ ticket } = await res.json());
    } catch (e) {
      options.onError?.(e);
      retry();
      return;
    }
    if (closed) return;
    const query = new URLSearchParams({ ticket });
    if (last !== null) query.set('lastEventId', String(last));
    const es = new ES(`${path}/events?${query}`);
    source = es;
    opens += 1;
    es.onmessage = (m) => {
      if (m.lastEventId) last = m.lastEventId;
      options.onEvent?.(JSON.parse(m.data), m.lastEventId || null);
    };
    es.onerror = () => {
      // CLOSED: the platform gave up (a refusal); CONNECTING: it retries itself.
      if (es.readyState === 2 && source === es) {
        source = null;
        retry();
      }
    };
  }
  open();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      source?.close();
    },
    get lastEventId() { return last; },
    get opens() { return opens; },
  };
}
