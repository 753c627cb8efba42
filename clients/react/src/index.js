// @agui-gateway/react — React hooks over @agui-gateway/client.
//
// `useThread` is a shared AG-UI thread as React state: the snapshot, then
// every event live (the session folds messages and state; each change is a
// new object, so components re-render by reference), the thread's runs tree
// and helpers for its branches. `useGatewayAgent` (`./agent`, which needs
// @ag-ui/client) is a GatewayAgent held for the component's life, for AG-UI
// and CopilotKit apps. Plain ES modules with hand-written types next to
// them, like the client package: no build step.

import { useEffect, useMemo, useState, useSyncExternalStore } from 'react';
import { GatewayConnection } from '@agui-gateway/client';

/**
 * A GatewayConnection for the component's life: made once, connected on
 * mount, closed on unmount (React's StrictMode double mount reconnects it).
 * `options` are GatewayConnection's; only the first render's are used.
 */
export function useGatewayConnection(options) {
  const [connection] = useState(() => new GatewayConnection(options));
  useEffect(() => {
    connection.connect().catch(() => {}); // errors reach the hooks' `error`
    return () => connection.close();
  }, [connection]);
  return connection;
}

/** How many mounted hooks watch each session: the last one unsubscribes. */
const watchers = new WeakMap();

/**
 * The store behind useThread: one per (connection, threadId) and hook. Its
 * view is rebuilt (a new frozen object) whenever the session changes, which
 * is what useSyncExternalStore compares.
 */
class ThreadStore {
  constructor(connection, threadId, options) {
    this.connection = connection;
    this.session = connection.session(threadId);
    this.options = options;
    this.listeners = new Set();
    this.status = 'connecting';
    this.error = null;
    this.runs = null;
    this.runsAsked = 0;
    this.stops = [];
    this.actions = this.#actions();
    this.view = this.#build();
    this.subscribe = (fn) => { this.listeners.add(fn); return () => this.listeners.delete(fn); };
    this.getSnapshot = () => this.view;
  }

  start() {
    const s = this.session;
    watchers.set(s, (watchers.get(s) || 0) + 1);
    this.stops = [
      s.on('snapshot', () => { this.status = 'ready'; this.#changed(); this.#loadRuns(); }),
      s.on('event', ({ event }) => {
        if (this.status !== 'ready') this.status = 'ready';
        this.#changed();
        if (event.type === 'RUN_STARTED' || event.type === 'RUN_FINISHED' || event.type === 'RUN_ERROR') this.#loadRuns();
      }),
      s.on('error', (e) => { this.error = e; this.#changed(); }),
      s.on('presence', () => this.#changed()),
      this.connection.on('state', () => this.#changed()),
    ];
    this.connection.connect()
      .then(() => s.subscribe())
      .then(() => { this.status = 'ready'; this.#changed(); }, (e) => {
        // A thread nobody has run yet: empty until its first run (which
        // subscribes this connection to it).
        if (e?.code === 'not_found') this.status = 'empty';
        else if (e?.code !== 'closed') { this.status = 'error'; this.error = e; }
        this.#changed();
      });
  }

  stop() {
    for (const stop of this.stops) stop();
    this.stops = [];
    const left = (watchers.get(this.session) || 1) - 1;
    watchers.set(this.session, left);
    if (left === 0 && this.connection.isOpen) this.session.unsubscribe().catch(() => {});
  }

  #changed() {
    this.view = this.#build();
    for (const fn of [...this.listeners]) fn();
  }

  /** The runs tree again (newest answer wins), when the hook wants it. */
  #loadRuns() {
    if (this.options.runs === false) return;
    const asked = ++this.runsAsked;
    this.session.allRuns().then((tree) => {
      if (asked !== this.runsAsked) return;
      this.runs = tree.runs;
      this.#changed();
    }, () => {});
  }

  #build() {
    const s = this.session;
    return Object.freeze({
      status: this.status,
      error: this.error,
      connection: this.connection.state,
      threadId: s.threadId,
      seq: s.seq,
      messages: s.messages,
      state: s.state,
      latestRun: s.latestRun,
      isRunning: s.latestRun?.status === 'running',
      headRunId: s.headRunId,
      activeAgent: s.activeAgent,
      interrupts: s.interrupts,
      runs: this.runs,
      viewers: s.viewers(),
      typing: s.viewers().filter((w) => w.composing).map((w) => w.userId),
      ...this.actions,
    });
  }

  /** Stable functions (the same across renders): the session's commands and
   *  the branch helpers over the runs tree. */
  #actions() {
    const s = this.session;
    const runsNow = () => this.runs || [];
    return Object.freeze({
      run: (params, options) => s.run(params, options),
      resume: (entries, extra, options) => s.resume(entries, extra, options),
      regenerate: (messageId, extra, options) => s.regenerate(messageId, extra, options),
      edit: (messageId, message, extra, options) => s.edit(messageId, message, extra, options),
      cancel: (runId, options) => s.cancel(runId, options),
      meta: (metaType, payload, clientEventId, options) => s.meta(metaType, payload, clientEventId, options),
      switchAgent: (agent, options) => s.switchAgent(agent, options),
      composing: (on, options) => s.composing(on, options),
      /** Continues from the end of `runId` instead of the head (a branch). */
      continueFrom: (runId, params, options) => s.run({ ...params, parentRunId: runId }, options),
      /** The conversation as it was at the end of `runId` (its branch). */
      viewAt: (runId, options) => s.fetchSnapshot(runId, options),
      /** `runId` and its siblings (the runs sharing its base), oldest first. */
      siblings: (runId) => {
        const all = runsNow();
        const me = all.find((r) => r.runId === runId);
        return me ? all.filter((r) => r.parentRunId === me.parentRunId) : [];
      },
      /** The alternatives to message `messageId`: the runs that are siblings
       *  of the one that produced it (regenerations, edits), oldest first,
       *  each with whether it is on the head's branch. */
      alternatives: (messageId) => {
        const all = runsNow();
        const producer = all.find((r) => r.outputMessageIds?.includes(messageId) || r.inputMessageIds?.includes(messageId));
        if (!producer) return [];
        const onHead = headPath(all, s.headRunId);
        return all.filter((r) => r.parentRunId === producer.parentRunId).map((r) => ({ run: r, onHead: onHead.has(r.runId) }));
      },
      refreshRuns: () => this.#loadRuns(),
    });
  }
}

/** The run ids from `head` back to the root. */
function headPath(runs, head) {
  const byId = new Map(runs.map((r) => [r.runId, r]));
  const path = new Set();
  for (let id = head; id && !path.has(id); id = byId.get(id)?.parentRunId) path.add(id);
  return path;
}

/**
 * A shared thread as React state: `{status, error, seq, messages, state,
 * latestRun, isRunning, headRunId, activeAgent, interrupts, runs, viewers,
 * typing, …actions}`.
 * `status`: `connecting`, `ready`, `empty` (nobody has run on the thread
 * yet; a `run` creates it) or `error`. `options.runs: false` skips the runs
 * tree. Actions are stable across renders.
 */
export function useThread(connection, threadId, options = {}) {
  const store = useMemo(() => new ThreadStore(connection, threadId, options), [connection, threadId]);
  useEffect(() => {
    store.start();
    return () => store.stop();
  }, [store]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}
