// GatewayAgent: an @ag-ui/client AbstractAgent whose runs go through the
// gateway's WebSocket, and which also folds the runs other people start on
// its thread — so any AG-UI frontend (CopilotKit included) gets shared
// sessions. Messages, state and pending interrupts are folded by
// @ag-ui/client itself (runAgent / connectAgent → defaultApplyEvents): this
// file only decides which journaled events belong to which run.

import { AbstractAgent } from '@ag-ui/client';
import { Observable } from 'rxjs';
import { GatewayConnection, GatewayError } from './index.js';

const TERMINAL = new Set(['RUN_FINISHED', 'RUN_ERROR']);

/** A message as @ag-ui/client keeps it (`subagentRunId: null` omitted). */
function withoutNullSubagent(message) {
  if (message.subagentRunId !== null) return message;
  const { subagentRunId, ...rest } = message;
  return rest;
}

export class GatewayAgent extends AbstractAgent {
  /**
   * @param {object} config `agent` (the gateway's agent id), `threadId`,
   *   and either `connection` (a shared GatewayConnection) or the
   *   GatewayConnection options (`url`, `token`, `WebSocket`, …); `follow`
   *   (default true): fold other people's runs on the thread live;
   *   `strategy`: the run strategy to ask for.
   */
  constructor(config = {}) {
    if (!config.agent) throw new TypeError('GatewayAgent: `agent` (the gateway agent id) is required');
    if (!config.threadId) throw new TypeError('GatewayAgent: `threadId` is required');
    super({ ...config, agentId: config.agentId ?? config.agent });
    this.gatewayAgentId = config.agent;
    this.connection = config.connection ?? new GatewayConnection(config);
    this.ownsConnection = !config.connection;
    this.session = this.connection.session(this.threadId);
    this.follow = config.follow ?? true;
    this.strategy = config.strategy;
    this.config = config;
    /** Message ids the thread already holds: a run sends only the others. */
    this.known = new Set();
    /** The state the thread holds, as last folded (sent again only if changed). */
    this.threadState = '{}';
    /** Runs this agent started, by runId: where their events go. */
    this.own = new Map();
    /** Other people's runs waiting to be folded, in order. */
    this.foreign = [];
    this.followingNow = null;
    /** The run the journal is in (RUN_STARTED seen, its end not yet). */
    this.current = null;
    /** A run that was already running when we joined: folded by a fresh snapshot once it ends. */
    this.joinedMidRun = null;
    this.subscribe({
      onRunFinalized: ({ state }) => { this.threadState = JSON.stringify(state ?? {}); },
      // A journaled MESSAGES_SNAPSHOT is the thread's conversation as the
      // gateway folds it (a fork journals its branch's history this way):
      // taken exactly, in its order. @ag-ui/client's own merge keeps the
      // order it first saw messages in, so a branch from a run further back
      // (its answer arriving after a newer question) would end reordered.
      onMessagesSnapshotEvent: ({ event }) => ({ messages: event.messages.map(withoutNullSubagent) }),
    });
    this.stops = [
      this.session.on('snapshot', (frame) => this.#snapshot(frame)),
      this.session.on('event', ({ event }) => this.#event(event)),
    ];
  }

  /** Connects (if needed) and subscribes; resolves once the thread's
   *  snapshot is folded in. runAgent calls it by itself. */
  async attach() {
    await this.connection.connect();
    if (this.session.seq !== null && this.session.ready) return;
    try {
      await this.session.subscribe();
    } catch (e) {
      // A thread nobody has run yet, for a token without a grant on it
      // (with one, the subscribe succeeds: an empty snapshot at seq 0):
      // its first run, ours, creates it and subscribes this connection.
      if (e.code !== 'not_found') throw e;
    }
  }

  /** Stops watching the thread (and closes a connection it opened). */
  async detach() {
    for (const stop of this.stops) stop();
    try {
      await this.session.unsubscribe();
    } finally {
      if (this.ownsConnection) this.connection.close();
    }
  }

  /** The thread's run as the gateway reports it: `{runId, agent, status}`. */
  get runStatus() {
    return this.session.latestRun;
  }

  #snapshot(frame) {
    this.known = new Set((frame.messages || []).map((m) => m.id));
    this.threadState = JSON.stringify(frame.state ?? {});
    this.current = frame.run?.status === 'running' ? frame.run.runId : null;
    this.joinedMidRun = this.current;
    this.setMessages(frame.messages || []);
    this.setState(frame.state ?? {});
    this.pendingInterrupts = frame.interrupts || [];
  }

  #remember(event) {
    const add = (id) => id && this.known.add(id);
    switch (event.type) {
      case 'RUN_STARTED':
        for (const m of event.input?.messages || []) add(m.id);
        break;
      case 'TEXT_MESSAGE_START':
      case 'TEXT_MESSAGE_CHUNK':
      case 'REASONING_MESSAGE_START':
      case 'TOOL_CALL_RESULT':
        add(event.messageId);
        break;
      case 'TOOL_CALL_START':
      case 'TOOL_CALL_CHUNK':
        add(event.parentMessageId);
        break;
      case 'MESSAGES_SNAPSHOT':
        for (const m of event.messages || []) add(m.id);
        break;
      default:
    }
  }

  #event(event) {
    this.#remember(event);
    if (event.type === 'RUN_STARTED') this.current = event.runId;
    const runId = this.current;
    if (TERMINAL.has(event.type)) this.current = null;
    if (runId === null) return; // between runs (META): nothing to fold
    const own = this.own.get(runId);
    if (own) {
      own.next(event);
      if (TERMINAL.has(event.type)) own.complete();
      return;
    }
    if (this.joinedMidRun === runId) {
      // Its start is before our snapshot: fold it from a fresh one.
      if (TERMINAL.has(event.type)) {
        this.joinedMidRun = null;
        this.session.resync();
      }
      return;
    }
    if (!this.follow) return;
    let run = this.foreign.find((r) => r.runId === runId) || (this.followingNow?.runId === runId ? this.followingNow : null);
    if (!run) {
      run = { runId, events: [], done: false, sink: null };
      this.foreign.push(run);
      this.#drainForeign();
    }
    if (run.sink) run.sink.next(event);
    else run.events.push(event);
    if (TERMINAL.has(event.type)) {
      run.done = true;
      run.sink?.complete();
    }
  }

  /** Folds other people's runs one after the other, with @ag-ui/client's
   *  own connectAgent (so subscribers see them as runs). */
  async #drainForeign() {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.foreign.length) {
        // One fold at a time: wait for a run of our own to finish folding.
        while (this.isRunning) await new Promise((resolve) => setTimeout(resolve, 0));
        this.followingNow = this.foreign.shift();
        // The gateway accepted this run, so the interrupts it answers (or
        // that it supersedes) are settled: @ag-ui/client's own check of
        // pending interrupts is for runs this agent starts.
        const resume = this.followingNow.events[0]?.input?.resume;
        if (!Array.isArray(resume)) this.pendingInterrupts = [];
        try {
          await this.connectAgent({ runId: this.followingNow.runId, ...(Array.isArray(resume) ? { resume } : {}) });
        } catch (e) {
          this.session.emit('error', e instanceof GatewayError ? e : new GatewayError('internal', String(e?.message || e)));
        }
        this.followingNow = null;
      }
    } finally {
      this.draining = false;
    }
  }

  /** @ag-ui/client's connect(): the followed run's events. */
  connect() {
    const run = this.followingNow;
    return new Observable((subscriber) => {
      if (!run) {
        subscriber.complete();
        return undefined;
      }
      for (const event of run.events.splice(0)) subscriber.next(event);
      if (run.done) subscriber.complete();
      else run.sink = subscriber;
      return () => { run.sink = null; };
    });
  }

  /**
   * @ag-ui/client's run(): sends the input's new messages (the thread's
   * history stays in the gateway's journal) as a `run` — or a `resume`
   * when the input answers interrupts — and emits that run's journaled
   * events.
   */
  run(input) {
    return new Observable((subscriber) => {
      const runId = input.runId;
      this.own.set(runId, subscriber);
      this.activeRunId = runId;
      (async () => {
        await this.attach();
        const messages = (input.messages || []).filter((m) => !this.known.has(m.id));
        const common = {
          runId,
          agent: this.gatewayAgentId,
          ...(messages.length ? { messages } : {}),
          ...(input.tools?.length ? { tools: input.tools } : {}),
          ...(input.context?.length ? { context: input.context } : {}),
          ...(input.forwardedProps && Object.keys(input.forwardedProps).length ? { forwardedProps: input.forwardedProps } : {}),
        };
        if (input.resume?.length) {
          await this.session.resume(input.resume, common);
        } else {
          const state = JSON.stringify(input.state ?? {});
          await this.session.run({
            ...common,
            ...(state !== this.threadState ? { state: input.state } : {}),
            ...(this.strategy ? { strategy: this.strategy } : {}),
          });
        }
      })().catch((e) => {
        this.own.delete(runId);
        subscriber.error(e);
      });
      return () => {
        this.own.delete(runId);
        if (this.activeRunId === runId) this.activeRunId = null;
      };
    });
  }

  /** Cancels this agent's active run on the gateway (every viewer sees it end). */
  abortRun() {
    if (this.activeRunId) this.session.cancel(this.activeRunId).catch(() => {});
    super.abortRun();
  }

  /** A copy on the same connection and thread (CopilotKit clones agents). */
  clone() {
    const copy = new GatewayAgent({ ...this.config, connection: this.connection, threadId: this.threadId });
    copy.messages = structuredClone(this.messages);
    copy.state = structuredClone(this.state);
    copy.pendingInterrupts = structuredClone(this.pendingInterrupts);
    copy.known = new Set(this.known);
    copy.threadState = this.threadState;
    copy.subscribers = [...this.subscribers];
    return copy;
  }
}

export { GatewayConnection, GatewayError };
