// agui-gateway inspector. Speaks only the public contract: the WebSocket
// `/v1/ws` (through the client package, clients/typescript, served next to
// this file) and the HTTP routes. Everything an agent or another person
// wrote is untrusted: it is only ever put into the page as text
// (textContent, text nodes, input values), never as HTML.
import { GatewayConnection } from './agui-gateway-client.js';

const $ = (selector) => document.querySelector(selector);

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const json = (v) => (typeof v === 'string' ? v : JSON.stringify(v));

const TOKEN_KEY = 'agui-inspector.token';
const DEV_KEY = 'agui-inspector.dev';
/** A pasted token's countdown shows this long before it expires. */
const EXPIRY_WARNING_MS = 5 * 60_000;
/** The gateway's thread-list page size, and the most one read may ask for. */
const THREADS_PAGE = 50;
const THREADS_MAX_LIMIT = 500;
/** How often the thread list is re-read while the page is visible. */
const THREADS_REFRESH_MS = 3_000;
/** How close to its bottom a scrolling box counts as "at the bottom" (so
 *  it follows new content): a few pixels of rounding at any zoom. */
const FOLLOW_SLACK_PX = 4;

const app = {
  token: sessionStorage.getItem(TOKEN_KEY),
  dev: JSON.parse(sessionStorage.getItem(DEV_KEY) || 'null'),
  // The package's connection: auth, reconnect with backoff, resubscribe
  // after the last seq, request/answer by id.
  conn: null,
  // The gateway closed the connection for an expired or refused token: no
  // reconnecting until the person gives a new one.
  stopped: false,
  thread: null,
  session: null,
  threadsCursor: null,
  // Bumped by every thread-list read; an answer to an older one is dropped.
  threadsGeneration: 0,
  // Thread-list reads in flight (a live refresh waits for none).
  threadsReading: 0,
  threadsTimer: null,
  // A live refresh was asked for while a read was in flight.
  threadsStale: false,
  refreshTimer: null,
  countdownTimer: null,
  // The run whose end the read-only view shows (null: the live view, which
  // follows the head), and a counter that drops stale run-tree answers.
  atRun: null,
  runsGeneration: 0,
};

// ---------- errors, said plainly ----------

const ERROR_WORDS = {
  unauthenticated: 'Not signed in, or the token has expired',
  forbidden: 'Not allowed',
  not_found: 'Not found (or not visible to you)',
  invalid: 'The gateway refused this as invalid',
  conflict: 'Conflict',
  rate_limited: 'Too many requests',
  too_large: 'Too large',
  unavailable: 'Unavailable for now (the agent or the gateway); try again shortly',
  internal: 'The gateway hit an internal error',
  disconnected: 'Not connected (the page reconnects by itself)',
  timeout: 'No answer from the gateway in time',
};

/** An error from a command or a route as a sentence a person can act on. */
function describeError(e) {
  const head = ERROR_WORDS[e.code] || (e.code ? `Error (${e.code})` : 'Error');
  let text = e.message ? `${head}: ${e.message}` : head;
  if (e.retryAfter) text += ` — try again in ${e.retryAfter} s.`;
  return text;
}

/** An Error carrying the contract's `code` (and `retryAfter`, if any). */
function contractError(body) {
  return Object.assign(new Error(body.message || ''), { code: body.code, retryAfter: body.retryAfter });
}

// ---------- tokens ----------

function claims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part + '='.repeat((4 - (part.length % 4)) % 4)));
  } catch {
    return null;
  }
}

function signIn(token, dev) {
  const c = claims(token);
  if (!c) return notice('That is not a JWT.', 'error', $('#signin'));
  adoptToken(token, dev || null);
  $('#signin').hidden = true;
  $('#app').hidden = false;
  $('#sign-out').hidden = false;
  $('#who').textContent = `${c.sub || '?'}${c.tenant ? ' @ ' + c.tenant : ''}`;
  connect();
  loadAgents();
  loadThreads(true);
  app.threadsTimer ??= setInterval(() => { if (!document.hidden) refreshThreads(); }, THREADS_REFRESH_MS);
}

/** Makes `token` the one every later frame and request uses. */
function adoptToken(token, dev = app.dev) {
  app.token = token;
  app.dev = dev;
  sessionStorage.setItem(TOKEN_KEY, token);
  sessionStorage.setItem(DEV_KEY, JSON.stringify(dev));
  watchExpiry();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(DEV_KEY);
  location.reload();
}

/** Plans for the token's expiry: a dev token is minted again a minute
 *  before; a pasted one can only be replaced by the person, so they get a
 *  countdown and a field to paste the next one in good time. */
function watchExpiry() {
  clearTimeout(app.refreshTimer);
  clearInterval(app.countdownTimer);
  $('#token-expiry').hidden = true;
  const exp = claims(app.token)?.exp;
  if (!exp) return;
  const left = exp * 1000 - Date.now();
  if (app.dev) app.refreshTimer = setTimeout(refreshDevToken, Math.max(5_000, left - 60_000));
  else app.refreshTimer = setTimeout(showExpiryCountdown, Math.max(0, left - EXPIRY_WARNING_MS));
}

async function refreshDevToken() {
  const fresh = await mintDev(app.dev.sub, app.dev.roles);
  if (!fresh) return;
  try {
    // On the open connection: no reconnect, nothing missed.
    if (app.conn?.isOpen) await app.conn.authenticate(fresh);
    adoptToken(fresh);
  } catch (e) {
    notice(`Could not refresh the development token — ${describeError(e)}`, 'error');
  }
}

function showExpiryCountdown() {
  $('#token-expiry').hidden = false;
  clearInterval(app.countdownTimer);
  const exp = claims(app.token)?.exp;
  const tick = () => {
    const left = exp ? Math.ceil((exp * 1000 - Date.now()) / 1000) : 0;
    $('#token-countdown').textContent = left > 0
      ? `Your token expires in ${minutes(left)}. Paste a new one here: it is sent on this connection, nothing reloads.`
      : 'The gateway no longer accepts your token. Paste a new one here to reconnect.';
    if (left <= 0) clearInterval(app.countdownTimer);
  };
  tick();
  app.countdownTimer = setInterval(tick, 1000);
}

const minutes = (s) => `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;

/** A replacement the person pasted: sent as an `auth` frame on the open
 *  connection (the gateway checks it names the same user); only if the
 *  gateway already closed the connection for expiry do we connect again. */
async function replaceToken(token) {
  const status = $('#token-status');
  const c = claims(token);
  if (!c) return (status.textContent = 'That is not a JWT.');
  if (c.exp && c.exp * 1000 <= Date.now()) return (status.textContent = 'That token has already expired.');
  if (app.stopped) {
    adoptToken(token, null);
    app.stopped = false;
    connect();
    return (status.textContent = 'Reconnecting with the new token…');
  }
  if (!app.conn?.isOpen) {
    // Between two attempts: the next one signs in with the new token.
    adoptToken(token, null);
    return (status.textContent = 'The new token is used as soon as the page reconnects.');
  }
  try {
    await app.conn.authenticate(token);
  } catch (e) {
    status.textContent = `The gateway refused the new token — ${describeError(e)}`;
    return;
  }
  adoptToken(token, null);
  $('#token-replace').value = '';
  status.textContent = '';
  notice('Token replaced on the open connection.');
}

async function mintDev(sub, roles) {
  try {
    const response = await fetch('dev-token', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sub, roles }),
    });
    const body = await response.json();
    if (!response.ok) throw contractError(body.error || {});
    return body.token;
  } catch (e) {
    notice(`Could not mint a token — ${describeError(e)}`, 'error', app.token ? null : $('#signin'));
    return null;
  }
}

// ---------- HTTP ----------

async function api(path) {
  const response = await fetch(path, { headers: { authorization: `Bearer ${app.token}` } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw contractError(body.error || { message: `HTTP ${response.status}` });
  return body;
}

async function loadAgents() {
  try {
    const { agents } = await api('/v1/agents');
    const select = $('#agent-select');
    const filter = $('#filter-agent');
    select.replaceChildren();
    for (const agent of agents) {
      select.append(el('option', { value: agent.id, text: agent.id }));
      if (![...filter.options].some((o) => o.value === agent.id)) {
        filter.append(el('option', { value: agent.id, text: agent.id }));
      }
    }
  } catch (e) {
    notice(`Agents — ${describeError(e)}`, 'error');
  }
}

/** Reads the thread list: `fresh` from its first page (a click, a filter),
 *  else the next page ("more"). A person's read always wins over a live
 *  refresh still in flight (its answer is dropped). */
async function loadThreads(fresh, limit = null, quiet = false) {
  const generation = ++app.threadsGeneration;
  const query = new URLSearchParams();
  if ($('#filter-agent').value) query.set('agent', $('#filter-agent').value);
  if ($('#filter-status').value) query.set('status', $('#filter-status').value);
  if (!fresh && app.threadsCursor) query.set('cursor', app.threadsCursor);
  if (limit) query.set('limit', String(limit));
  app.threadsReading += 1;
  try {
    const { threads, nextCursor } = await api(`/v1/threads?${query}`);
    if (generation !== app.threadsGeneration) return;
    showThreads(threads, !fresh);
    app.threadsCursor = nextCursor;
    $('#threads-more').hidden = nextCursor === null || nextCursor === undefined;
  } catch (e) {
    if (!quiet) notice(`Threads — ${describeError(e)}`, 'error');
  } finally {
    app.threadsReading -= 1;
    if (app.threadsReading === 0 && app.threadsStale) {
      app.threadsStale = false;
      refreshThreads();
    }
  }
}

/** The live list: the public contract has no subscription to the thread
 *  list, so the page re-reads what it shows (as many threads as are listed,
 *  from the first) every few seconds while it is visible, and at once when
 *  a run on the open thread starts or ends. Quiet: a failure here is the
 *  connection's, shown by its status. */
function refreshThreads() {
  if (!app.token) return;
  // One read at a time: asked for meanwhile, it follows the one in flight.
  if (app.threadsReading > 0) {
    app.threadsStale = true;
    return;
  }
  const shown = $('#threads').children.length;
  const limit = Math.min(THREADS_MAX_LIMIT, Math.max(THREADS_PAGE, shown));
  loadThreads(true, limit === THREADS_PAGE ? null : limit, true);
}

/** Shows `threads` (after the ones listed when `append`), reusing the item
 *  of a thread already listed: a click aimed at it still lands on it. */
function showThreads(threads, append) {
  const list = $('#threads');
  const items = new Map([...list.children].map((item) => [item.dataset.thread, item]));
  const shown = append ? [...list.children] : [];
  for (const t of threads) {
    const when = new Date(t.updatedMs).toLocaleTimeString();
    const viewers = t.viewers === undefined ? '' : ` · ${t.viewers} watching`;
    let item = items.get(t.threadId);
    if (!item) {
      item = el('li', { class: 'thread-item', 'data-thread': t.threadId }, el('strong', { text: t.threadId }), el('small'));
      item.addEventListener('click', () => openThread(t.threadId));
    }
    item.querySelector('small').textContent = `${t.agent || 'no agent'} · ${t.status} · ${when}${viewers}`;
    item.classList.toggle('active', app.thread?.id === t.threadId);
    if (!shown.includes(item)) shown.push(item);
  }
  list.replaceChildren(...shown);
}

// ---------- WebSocket ----------

function connect() {
  if (!app.conn) {
    app.conn = new GatewayConnection({
      url: `${location.origin}/v1/ws`,
      // A token the gateway refused (expired) is not offered again: the
      // person pastes a new one (or the page mints a dev token).
      token: ({ reason }) => (reason === 'rejected' ? null : app.token),
      // The page plans refreshes itself: a dev token is minted again, a
      // pasted one gets a countdown.
      autoRefresh: false,
      reconnect: { initialDelayMs: 250, maxDelayMs: 5000 },
    });
    app.conn.on('state', (state) => setStatus(state === 'open'));
    app.conn.on('error', (e) => {
      if (e.closeCode === 4001) {
        app.stopped = true;
        notice(`Signed out by the gateway: ${e.message}. Paste a new token above to reconnect.`, 'error');
        showExpiryCountdown();
        return;
      }
      notice(describeError(e), 'error');
    });
  }
  app.conn.connect().catch(() => { /* told through 'error' */ });
}

function setStatus(on) {
  const status = $('#conn-status');
  status.textContent = on ? 'live' : 'reconnecting…';
  status.className = `pill ${on ? 'on' : 'off'}`;
}

/** Sends a command; resolves with its ack, rejects with its error (every
 *  caller handles the rejection). */
function send(command) {
  if (!app.conn) return Promise.reject(Object.assign(new Error('not connected'), { code: 'disconnected' }));
  return app.conn.send(command);
}

// ---------- a thread ----------

/** The rendering of one thread's conversation into `box` (the live view
 *  `#conversation`, or `#conversation-at` for the read-only view at a run). */
function newThreadView(id, box = '#conversation') {
  return {
    id,
    box: () => $(box),
    lastSeq: null,
    // Rendered entities by id. Every map here points into #conversation:
    // whatever clears the conversation clears them all (resetConversation),
    // or later deltas would land in detached nodes.
    messages: new Map(),
    tools: new Map(),
    reasoning: new Map(),
    activities: new Map(),
    subagents: new Map(),
    customs: new Map(),
    state: {},
    interrupts: [],
    run: null,
    types: new Set(),
    // Who spoke each message (message id → agent), from the run tree's
    // `outputMessageIds`; and the agent of the run streaming now (its
    // journaled RUN_STARTED names it), for messages still being written.
    speakers: new Map(),
    liveAgent: null,
    // The run tree as last read (null before): which messages the gateway
    // would regenerate (see `cannotRegenerate`).
    runTree: null,
    // The head's run status as last set ('running', 'finished', …).
    runStatus: null,

    snapshot(frame) {
      if (frame.reset) notice(`Reset: the journal no longer holds what followed seq ${this.lastSeq ?? 0}; showing the snapshot at seq ${frame.seq}.`, 'gap');
      this.lastSeq = frame.seq;
      const conversation = this.box();
      // The snapshot's messages are named when the run tree arrives.
      this.liveAgent = frame.run?.status === 'running' ? frame.run.agent : null;
      this.turnBy = frame.run?.status === 'running' ? frame.run.startedBy : null;
      this.showActiveAgent(frame.activeAgent, frame.activeAgentBy, true);
      following(conversation, () => {
        this.resetConversation();
        for (const message of frame.messages || []) this.renderMessage(message);
      });
      this.state = frame.state ?? {};
      renderLiveState(this.state);
      this.run = frame.run;
      this.headRunId = frame.headRunId ?? frame.run?.runId ?? null;
      this.setRun(frame.run?.status || 'idle', frame.run?.runId);
      loadRuns(this);
      this.interrupts = frame.interrupts || [];
      renderInterrupts(this);
      timelineRow(frame.seq, frame.reset ? 'snapshot (reset)' : 'snapshot', Date.now(), JSON.stringify(frame).length, frame.reset);
      // Joined late: what came before the snapshot can be read back.
      this.snapshotSeq = frame.seq;
      $('#timeline-earlier').hidden = !(frame.seq > 0);
    },

    event(frame) {
      const event = frame.event;
      if (this.lastSeq !== null && frame.seq <= this.lastSeq) return; // seen already
      const gap = this.lastSeq !== null && frame.seq !== this.lastSeq + 1;
      if (gap) notice(`Gap: seq ${this.lastSeq + 1}–${frame.seq - 1} never arrived.`, 'gap');
      this.lastSeq = frame.seq;
      timelineRow(frame.seq, event.type, event.timestamp || Date.now(), JSON.stringify(event).length, gap, timelineNote(event, this), event);
      this.apply(event);
      // The thread's status in the list changes with its runs.
      if (['RUN_STARTED', 'RUN_FINISHED', 'RUN_ERROR'].includes(event.type)) {
        refreshThreads();
        // …and so does the run tree (a new head, a run's end).
        if (event.type === 'RUN_STARTED') this.headRunId = event.runId;
        loadRuns(this);
      }
    },

    setRun(status, runId) {
      const pill = $('#run-status');
      pill.textContent = runId ? `${status} · ${runId}` : status;
      $('#cancel-run').hidden = status !== 'running';
      this.runId = runId;
      this.runStatus = status;
    },

    resetConversation() {
      for (const map of [this.messages, this.tools, this.reasoning, this.activities, this.subagents, this.customs]) map.clear();
      this.box().replaceChildren();
    },

    apply(e) {
      const conversation = this.box();
      following(conversation, () => this.applyTo(conversation, e));
    },

    applyTo(conversation, e) {
      switch (e.type) {
        case 'RUN_STARTED':
          this.setRun('running', e.runId);
          this.liveAgent = e['agui-gateway']?.agent ?? this.liveAgent;
          this.noteRunAgent(e['agui-gateway']);
          // A run that answers interrupts: everyone watching sees the
          // answer where the question was, before the form goes away.
          if (Array.isArray(e.input?.resume)) for (const entry of e.input.resume) this.renderAnswer(entry);
          this.interrupts = [];
          renderInterrupts(this);
          for (const message of e.input?.messages || []) this.renderMessage(message);
          break;
        case 'RUN_FINISHED': {
          const outcome = e.outcome?.type || 'success';
          this.setRun(outcome === 'interrupt' ? 'interrupted' : outcome === 'cancelled' ? 'cancelled' : 'finished', e.runId);
          this.interrupts = outcome === 'interrupt' ? e.outcome.interrupts || [] : [];
          renderInterrupts(this);
          break;
        }
        case 'RUN_ERROR':
          this.setRun('error', this.runId);
          conversation.append(el('div', { class: 'msg', 'data-role': 'error' },
            el('span', { class: 'role', text: `run error ${e.code || ''}` }), e.message || ''));
          break;
        case 'TEXT_MESSAGE_START':
          this.message(e.messageId, e.role || 'assistant', e.subagentRunId);
          break;
        case 'TEXT_MESSAGE_CONTENT':
        case 'TEXT_MESSAGE_CHUNK':
          this.message(e.messageId, e.role || 'assistant', e.subagentRunId).body.append(e.delta || '');
          break;
        case 'REASONING_MESSAGE_START':
        case 'THINKING_TEXT_MESSAGE_START':
          this.thinking(e.messageId || 'thinking', e.subagentRunId);
          break;
        case 'REASONING_MESSAGE_CONTENT':
        case 'REASONING_MESSAGE_CHUNK':
        case 'THINKING_TEXT_MESSAGE_CONTENT':
          this.thinking(e.messageId || 'thinking', e.subagentRunId).append(e.delta || '');
          break;
        case 'TOOL_CALL_START':
        case 'TOOL_CALL_CHUNK':
          this.tool(e.toolCallId, e.toolCallName, this.ownerOf(e)).args.append(e.delta || '');
          break;
        case 'TOOL_CALL_ARGS':
          this.tool(e.toolCallId, undefined, e.subagentRunId).args.append(e.delta || '');
          break;
        case 'TOOL_CALL_RESULT':
          this.tool(e.toolCallId, undefined, e.subagentRunId).result.textContent = `→ ${json(e.content)}`;
          break;
        case 'STATE_SNAPSHOT':
          this.state = e.snapshot ?? {};
          renderLiveState(this.state);
          break;
        case 'STATE_DELTA':
          try {
            this.state = applyPatch(this.state, e.delta || []);
            renderLiveState(this.state);
          } catch (err) {
            notice(`State delta did not apply (${err.message}); re-reading the snapshot.`, 'error');
            this.reread((s) => { this.state = s.state; renderLiveState(s.state); });
          }
          break;
        case 'MESSAGES_SNAPSHOT':
          this.replaceMessages(e.messages || []);
          break;
        case 'ACTIVITY_SNAPSHOT':
          this.activitySnapshot(e);
          break;
        case 'ACTIVITY_DELTA':
          this.activityDelta(e);
          break;
        case 'SUBAGENT_STARTED':
        case 'SUBAGENT_FINISHED':
        case 'SUBAGENT_ERROR':
          this.subagentEvent(e);
          break;
        case 'STEP_STARTED':
        case 'STEP_FINISHED':
          this.place(e.subagentRunId).append(el('div', { class: 'marker', text: `${e.type === 'STEP_STARTED' ? '▶' : '■'} ${e.stepName || ''}` }));
          break;
        case 'META':
          renderMeta(e);
          break;
        case 'CUSTOM':
          if (e.name === 'agui-gateway/policy') notice(`Policy: ${json(e.value)}`);
          else if (e.name === 'agui-gateway/handoff' || e.name === 'agui-gateway/active-agent') this.handoff(e);
          else this.custom(e);
          break;
        default:
          // Everything else (RAW, REASONING_START/END, future types) is in
          // the timeline; the conversation shows what a person reads.
      }
    },

    /** One answer of a resume run, as a line in the conversation: what was
     *  asked (the pending interrupt it answers, when this page saw it) and
     *  what was answered. */
    renderAnswer(entry) {
      const asked = this.interrupts.find((i) => i.id === entry.interruptId);
      const payload = isObject(entry.payload) ? entry.payload : {};
      const verdict = entry.status === 'cancelled' ? 'cancelled'
        : payload.approved === false ? 'rejected'
          : payload.approved === true ? 'approved' : 'answered';
      const fields = Object.entries(payload).filter(([name]) => name !== 'approved')
        .map(([name, value]) => `${name}: ${json(value)}`);
      const question = asked?.message || asked?.reason || entry.interruptId || 'an interrupt';
      const answer = `${verdict}${fields.length ? ` — ${fields.join(', ')}` : ''}`;
      this.place(undefined).append(el('div', { class: 'answer', 'data-interrupt': entry.interruptId || '', 'data-status': verdict },
        el('span', { class: 'role', text: 'answer' }), `${question}\n→ ${answer}`));
    },

    /** Re-reads the thread's snapshot over HTTP, for a delta that did not apply. */
    reread(use) {
      api(`/v1/threads/${encodeURIComponent(this.id)}`).then(use)
        .catch((err) => notice(`Could not re-read the thread — ${describeError(err)}`, 'error'));
    },

    /** Where an entity attributed to `subagentRunId` is shown: inside its
     *  subagent's group, or in the conversation for the parent agent. */
    place(subagentRunId) {
      return subagentRunId ? this.subagent(subagentRunId).body : this.box();
    },

    /** A tool call belongs where its parent message is, unless it says otherwise. */
    ownerOf(e) {
      return e.subagentRunId || this.messages.get(e.parentMessageId)?.subagentRunId;
    },

    message(id, role, subagentRunId) {
      let message = this.messages.get(id);
      if (!message) {
        const body = el('span', { class: 'body' });
        const node = el('div', { class: 'msg', 'data-role': role, 'data-id': id || '' }, el('span', { class: 'role', text: role }), body);
        // A branch starts from a message of the agent's own conversation:
        // answer it again, or say the question differently.
        if (id && !subagentRunId && role === 'assistant') node.append(el('button', { class: 'msg-action regenerate', title: 'answer this again (a sibling run)', text: '↻ regenerate' }));
        if (id && !subagentRunId && role === 'user') node.append(el('button', { class: 'msg-action edit', title: 'edit this message (a sibling run)', text: '✎ edit' }));
        // Several agents may speak on one thread (a handoff): each of its
        // own messages says whose it is.
        const speaker = role === 'assistant' && !subagentRunId ? el('span', { class: 'agent' }) : null;
        if (speaker) node.querySelector('.role').append(' · ', speaker);
        this.place(subagentRunId).append(node);
        message = { node, body, subagentRunId, speaker };
        this.messages.set(id, message);
        this.nameSpeaker(id, this.speakers.get(id) ?? app.thread?.speakers.get(id) ?? this.liveAgent);
        this.markRegenerable(id);
      }
      return message;
    },

    /** Learns from the run tree which messages can be regenerated. */
    learnRegenerable(runs) {
      this.runTree = runs;
      for (const id of this.messages.keys()) this.markRegenerable(id);
    },

    /** Hides message `id`'s regenerate where the gateway would refuse it,
     *  saying why on the message (`data-regenerable`, its title). */
    markRegenerable(id) {
      const message = this.messages.get(id);
      const button = message?.node.querySelector(':scope > .msg-action.regenerate');
      const tree = this.runTree ?? app.thread?.runTree;
      if (!button || !tree) return;
      // A message no run of the tree claims yet, while a run is running,
      // is that run's: the tree read at its RUN_STARTED may predate it
      // (a loaded page or gateway), and its question's run would pass.
      const claimed = tree.some((r) => (r.outputMessageIds || []).includes(id));
      const why = !claimed && this.runStatus === 'running'
        ? 'its run is still running'
        : cannotRegenerate(tree, id, this.questionBefore(id));
      button.hidden = Boolean(why);
      button.title = why ? `cannot regenerate: ${why}` : 'answer this again (a sibling run)';
      message.node.dataset.regenerable = why ? 'no' : 'yes';
    },

    /** The id of the last user message shown before message `id`. */
    questionBefore(id) {
      let question = null;
      for (const [other, m] of this.messages) {
        if (other === id) return question;
        if (m.node.dataset.role === 'user') question = other;
      }
      return question;
    },

    /** Shows `agent` as the speaker of message `id` (if it is one of the
     *  agent's own messages). */
    nameSpeaker(id, agent) {
      const message = this.messages.get(id);
      if (!message?.speaker || !agent) return;
      message.speaker.textContent = agent;
      message.node.dataset.agent = agent;
    },

    /** Learns who spoke each message from the run tree and names them. */
    learnSpeakers(runs) {
      for (const run of runs) {
        if (typeof run.agent !== 'string') continue;
        for (const id of run.outputMessageIds || []) {
          this.speakers.set(id, run.agent);
          this.nameSpeaker(id, run.agent);
        }
      }
    },

    /** A handoff (or a person's switch of the active agent): a line in the
     *  conversation where the next agent takes over. */
    handoff(e) {
      const v = e.value || {};
      const switched = e.name === 'agui-gateway/active-agent';
      const to = switched ? v.agent : v.toAgent;
      const result = switched ? 'switched' : v.result || 'accepted';
      if (result === 'accepted' || switched) this.liveAgent = to;
      if (switched) this.showActiveAgent(to, v.by, true);
      else if (result === 'accepted') this.showActiveAgent(to, this.turnBy);
      const text = switched
        ? `⇄ ${v.by || 'someone'} switched the thread to ${to}`
        : `⇄ handoff ${v.fromAgent || '?'} → ${to || '?'}${result === 'accepted' ? '' : ` (${result})`}${v.reason ? `: ${v.reason}` : ''}`;
      this.place(e.subagentRunId).append(el('div', { class: 'marker handoff', 'data-from': v.fromAgent || '', 'data-to': to || '', 'data-result': result, text }));
    },

    /** The header's "speaking" pill: the agent replies go to and who put
     *  it there (the snapshot's `activeAgentBy`, then live: a switch's
     *  `by`, the caller of a run that moved to a new agent or of the run a
     *  handoff took place in). Only the live view owns the header. */
    showActiveAgent(agent, by, always = false) {
      if (box !== '#conversation') return;
      const pill = $('#active-agent');
      if (!agent) {
        pill.hidden = true;
        return;
      }
      const changed = always || agent !== this.activeAgent || !this.activeAgentBy;
      this.activeAgent = agent;
      if (changed) this.activeAgentBy = by || null;
      pill.hidden = false;
      pill.dataset.agent = agent;
      pill.dataset.by = this.activeAgentBy || '';
      pill.textContent = `speaking: ${agent}${this.activeAgentBy ? ` · by ${this.activeAgentBy}` : ''}`;
    },

    /** A run's stamp, as it starts: a run (not a handoff) makes its agent
     *  the one speaking, credited to its caller if that is a change. */
    noteRunAgent(stamp) {
      if (!stamp) return;
      this.turnBy = stamp.by ?? null;
      if (stamp.agent && stamp.kind !== 'handoff') this.showActiveAgent(stamp.agent, stamp.by);
    },

    thinking(id, subagentRunId) {
      let reasoning = this.reasoning.get(id);
      if (!reasoning) {
        const body = el('span');
        const node = el('details', { class: 'reasoning', 'data-id': id }, el('summary', { text: 'reasoning' }), body);
        this.place(subagentRunId).append(node);
        reasoning = { node, body, subagentRunId };
        this.reasoning.set(id, reasoning);
      }
      return reasoning.body;
    },

    tool(id, name, subagentRunId) {
      let tool = this.tools.get(id);
      if (!tool) {
        const args = el('span', { class: 'args' });
        const result = el('div', { class: 'result' });
        this.place(subagentRunId).append(el('div', { class: 'tool', 'data-tool': id || '' }, el('span', { class: 'name', text: `tool ${name || '?'}(` }), args, ')', result));
        tool = { args, result };
        this.tools.set(id, tool);
      }
      return tool;
    },

    /** A tool call's arguments as an object, when they are complete JSON. */
    toolArgs(id) {
      try {
        const args = JSON.parse(this.tools.get(id)?.args.textContent || 'null');
        return isObject(args) ? args : null;
      } catch {
        return null;
      }
    },

    renderMessage(m) {
      if (m.role === 'tool') {
        this.tool(m.toolCallId, undefined, m.subagentRunId).result.textContent = `→ ${json(m.content)}`;
        return;
      }
      if (m.role === 'reasoning') {
        this.thinking(m.id, m.subagentRunId).append(textOf(m.content));
        return;
      }
      if (m.role === 'activity') {
        this.renderActivity(this.activity(m.id, m.subagentRunId), m.activityType, m.content);
        return;
      }
      const text = textOf(m.content);
      if (text || !(m.toolCalls || []).length) this.message(m.id, m.role || 'assistant', m.subagentRunId).body.append(text);
      for (const call of m.toolCalls || []) this.tool(call.id, call.function?.name, m.subagentRunId).args.append(call.function?.arguments || '');
    },

    /** MESSAGES_SNAPSHOT replaces the conversation. As the AG-UI client
     *  (and the gateway's fold) do, activity and reasoning messages are the
     *  client's own when the snapshot carries none of that role: those stay
     *  (shown first, in their order). */
    replaceMessages(messages) {
      const carries = (role) => messages.some((m) => m.role === role);
      const kept = [];
      if (!carries('activity')) for (const entry of this.activities) kept.push([this.activities, ...entry]);
      if (!carries('reasoning')) for (const entry of this.reasoning) kept.push([this.reasoning, ...entry]);
      this.resetConversation();
      for (const [map, id, item] of kept) {
        this.place(item.subagentRunId).append(item.node);
        map.set(id, item);
      }
      for (const message of messages) this.renderMessage(message);
    },

    // ----- activity: one block per activity message, snapshot + RFC 6902 deltas -----

    activity(id, subagentRunId) {
      let activity = this.activities.get(id);
      if (!activity) {
        const node = el('div', { class: 'activity', 'data-activity': id || '' });
        this.place(subagentRunId).append(node);
        activity = { node, subagentRunId, type: '', content: {} };
        this.activities.set(id, activity);
      }
      return activity;
    },

    renderActivity(activity, type, content) {
      activity.type = type ?? activity.type;
      activity.content = content ?? {};
      activity.node.replaceChildren(
        el('span', { class: 'role', text: `activity · ${activity.type || '?'}` }),
        el('div', { class: 'tree' }, tree(activity.content, activity.type || 'content')));
    },

    activitySnapshot(e) {
      const known = this.activities.has(e.messageId);
      const activity = this.activity(e.messageId, e.subagentRunId);
      // `replace: false` keeps an existing activity as it stands.
      if (!known || e.replace !== false) this.renderActivity(activity, e.activityType, e.content);
    },

    activityDelta(e) {
      const activity = this.activities.get(e.messageId);
      if (!activity) return notice(`Activity ${e.messageId}: a delta for an activity never shown.`, 'error');
      try {
        this.renderActivity(activity, undefined, applyPatch(activity.content, e.patch || []));
      } catch (err) {
        notice(`Activity ${e.messageId}: delta did not apply (${err.message}); re-reading the snapshot.`, 'error');
        this.reread((s) => {
          const m = (s.messages || []).find((x) => x.id === e.messageId && x.role === 'activity');
          if (m) this.renderActivity(activity, m.activityType, m.content);
        });
      }
    },

    // ----- subagents: one group per subagentRunId, holding what it produced -----

    subagent(id, parentSubagentRunId) {
      let group = this.subagents.get(id);
      if (!group) {
        const name = el('span', { class: 'name', text: id });
        const status = el('span', { class: 'status' });
        const body = el('div', { class: 'subagent-body' });
        const outcome = el('div', { class: 'outcome' });
        const node = el('details', { class: 'subagent', open: '', 'data-subagent': id },
          el('summary', {}, 'subagent ', name, ' ', status), body, outcome);
        // Set before placing: a parent chain must not recurse into itself.
        group = { node, name, status, body, outcome };
        this.subagents.set(id, group);
        (parentSubagentRunId && parentSubagentRunId !== id ? this.place(parentSubagentRunId) : this.box()).append(node);
      }
      return group;
    },

    subagentEvent(e) {
      const group = this.subagent(e.subagentRunId, e.parentSubagentRunId);
      const setStatus = (status, text) => {
        group.status.textContent = status;
        group.status.dataset.status = status;
        if (text !== undefined) group.outcome.textContent = text;
      };
      if (e.type === 'SUBAGENT_STARTED') {
        group.name.textContent = e.name || e.subagentRunId;
        if (e.description) group.node.title = e.description;
        setStatus('running');
      } else if (e.type === 'SUBAGENT_FINISHED') {
        const suspended = e.outcome?.type === 'suspended';
        setStatus(suspended ? 'suspended' : 'finished', e.result === undefined ? undefined : `result: ${json(e.result)}`);
      } else {
        setStatus('error', `error${e.code ? ` ${e.code}` : ''}: ${e.message || ''}`);
      }
    },

    // ----- custom events: one block per name (and subagent), latest value first -----

    custom(e) {
      const key = `${e.subagentRunId || ''}\u0000${e.name}`;
      let custom = this.customs.get(key);
      if (!custom) {
        const count = el('span', { class: 'count' });
        const latest = el('div', { class: 'latest' });
        const history = el('ol');
        this.place(e.subagentRunId).append(el('div', { class: 'custom', 'data-custom': e.name || '' },
          el('span', { class: 'role', text: `custom · ${e.name || '?'}` }), ' ', count, latest,
          el('details', {}, el('summary', { text: 'every value' }), history)));
        custom = { count, latest, history, n: 0 };
        this.customs.set(key, custom);
      }
      custom.n += 1;
      custom.count.textContent = `×${custom.n}`;
      custom.latest.textContent = json(e.value);
      custom.history.append(el('li', { text: json(e.value) }));
    },
  };
}

/** The text of a message's content (a string, or multimodal parts). */
function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part.type === 'text' ? part.text : `[${part.type}]`)).join('');
  }
  return content === undefined || content === null ? '' : JSON.stringify(content);
}

// ---------- branches: the run tree, the view at a run, regenerate and edit ----------

/** The most runs a thread remembers, and the run route's page limit: the
 *  whole tree in one read. */
const RUNS_LIMIT = 1000;

/** Reads the open thread's run tree again (on its snapshot and whenever a
 *  run starts or ends); an answer to an older read is dropped. */
async function loadRuns(view) {
  if (app.thread !== view || !app.session) return;
  const generation = ++app.runsGeneration;
  try {
    const tree = await app.session.runs({ limit: RUNS_LIMIT });
    if (app.thread === view && generation === app.runsGeneration) renderRuns(view, tree);
  } catch (e) {
    // A thread its first run has not created yet has no tree.
    if (e.code !== 'not_found' && app.thread === view) notice(`The run tree did not load — ${describeError(e)}`, 'error');
  }
}

/** Why the gateway would refuse to regenerate message `id` (`question`:
 *  the user message before it), or '' when it would not: the run it
 *  resolves to as `BaseRequest::Regenerate` does (src/thread/branch.rs: the
 *  run that produced it, else the run it was sent in, else the run that
 *  asked its question) must be known and ended, and a sibling of a run
 *  whose base waits on an interrupt works only for a run that answered it
 *  (the regenerate carries the same answers). */
function cannotRegenerate(runs, id, question) {
  const claims = (key, message) => (run) => (run[key] || []).includes(message);
  const run = runs.find(claims('outputMessageIds', id))
    || runs.find(claims('inputMessageIds', id))
    || (question ? runs.find(claims('inputMessageIds', question)) : undefined);
  if (!run) return 'no run this thread remembers produced it';
  if (run.status === 'running') return 'its run is still running';
  const base = runs.find((r) => r.runId === run.parentRunId);
  const answered = run.kind === 'resume' || run.kind === 'regenerate';
  if (base?.status === 'interrupted' && !answered) {
    return `its base (run ${base.runId}) waits on an interrupt this run did not answer`;
  }
  return '';
}

/** The run tree as a compact list, oldest first: a run's only child stays
 *  in line (a plain conversation is a column), siblings (runs on the same
 *  base: a regenerate, an edit, a branch) are indented and numbered n/m.
 *  The head's path is marked; clicking a run shows the conversation at its
 *  end (the head: the live view). */
function renderRuns(view, tree) {
  view.headRunId = tree.headRunId;
  const runs = tree.runs || [];
  view.learnSpeakers(runs);
  view.learnRegenerable(runs);
  const known = new Set(runs.map((r) => r.runId));
  const children = new Map();
  for (const run of runs) {
    const base = run.parentRunId && known.has(run.parentRunId) ? run.parentRunId : '';
    if (!children.has(base)) children.set(base, []);
    children.get(base).push(run);
  }
  const byId = new Map(runs.map((r) => [r.runId, r]));
  const onPath = new Set();
  for (let id = tree.headRunId; id && byId.has(id) && !onPath.has(id); id = byId.get(id).parentRunId) onPath.add(id);
  const list = $('#runs');
  list.replaceChildren();
  const walk = (base, depth) => {
    const siblings = children.get(base) || [];
    siblings.forEach((run, i) => {
      const indent = siblings.length > 1 ? depth + 1 : depth;
      const classes = ['run-item', run.runId === tree.headRunId ? 'head' : '', onPath.has(run.runId) ? 'on-path' : '', run.runId === app.atRun ? 'viewing' : ''];
      const item = el('li', { class: classes.filter(Boolean).join(' '), 'data-run': run.runId, 'data-parent': run.parentRunId || '', 'data-kind': run.kind || '' },
        el('button', { class: 'run-view', title: run.runId === tree.headRunId ? 'the head: the live view' : 'view the conversation at the end of this run' },
          siblings.length > 1 ? el('span', { class: 'sibling', text: `${i + 1}/${siblings.length}` }) : null,
          // Run ids are often UUIDs: the start tells them apart, the
          // tooltip has the whole id.
          el('span', { class: 'run-id', title: run.runId, text: run.runId.length > 14 ? `${run.runId.slice(0, 12)}…` : run.runId })),
        el('small', { text: ` ${run.kind || 'run'} · ${typeof run.agent === 'string' ? `${run.agent} · ` : ''}${run.status}${run.runId === tree.headRunId ? ' · head' : ''}` }),
        // Who did it: who started the run (a resume's starter answered the
        // interrupts it follows), and who answered this run's interrupts.
        run.startedBy ? el('small', { class: 'run-by', text: ` · ${run.kind === 'resume' ? 'answered' : 'started'} by ${run.startedBy}` }) : null,
        (run.answeredBy || []).length ? el('small', { class: 'run-answered', text: ` · answered by ${run.answeredBy.map((a) => a.by).join(', ')}` }) : null);
      item.style.paddingLeft = `${indent * 12}px`;
      list.append(item);
      walk(run.runId, indent);
    });
  };
  walk('', 0);
  $('#runs-count').textContent = runs.length ? `${runs.length}` : '';
}

/** Shows the conversation at the end of run `runId` (read-only: the live
 *  view keeps following the head underneath). The head itself is the live
 *  view. */
async function viewAtRun(runId) {
  const view = app.thread;
  if (!view || !app.session) return;
  if (runId === view.headRunId) {
    backToLive();
    return;
  }
  try {
    const snapshot = await app.session.fetchSnapshot(runId);
    if (app.thread !== view) return;
    app.atRun = runId;
    const at = newThreadView(view.id, '#conversation-at');
    at.resetConversation();
    for (const message of snapshot.messages || []) at.renderMessage(message);
    // The state as that run left it, not the head's.
    renderState(snapshot.state ?? {});
    $('#run-view-label').textContent = `The conversation at the end of run ${runId} (read-only; the live view follows the head).`;
    $('#run-view').hidden = false;
    $('#conversation').hidden = true;
    $('#conversation-at').hidden = false;
    markViewing();
  } catch (e) {
    notice(`Run ${runId} could not be shown — ${describeError(e)}`, 'error');
  }
}

/** Leaves the view at a run: the live conversation again. */
function backToLive() {
  app.atRun = null;
  $('#run-view').hidden = true;
  $('#conversation-at').hidden = true;
  $('#conversation-at').replaceChildren();
  $('#conversation').hidden = false;
  if (app.thread) renderState(app.thread.state);
  markViewing();
}

function markViewing() {
  writeLocation();
  document.querySelectorAll('#runs .run-item').forEach((i) => i.classList.toggle('viewing', i.dataset.run === app.atRun));
}

/** A message's "regenerate" or "edit" (in the live view or a view at a
 *  run): sent through the package's session; the new run becomes the head,
 *  so the page goes back to the live view to watch it. */
function messageAction(event) {
  const button = event.target.closest('button');
  const message = button?.closest('.msg');
  if (!button || !message || !app.session) return;
  const id = message.dataset.id;
  if (button.classList.contains('regenerate')) {
    backToLive();
    app.session.regenerate(id).catch((e) => notice(`Not regenerated — ${describeError(e)}`, 'error'));
  } else if (button.classList.contains('edit')) {
    if (message.querySelector('.edit-form')) return;
    const text = el('textarea', { class: 'edit-text', rows: '2' });
    text.value = message.querySelector('.body').textContent;
    const form = el('div', { class: 'edit-form row' }, text,
      el('button', { class: 'edit-send primary', text: 'Send edit' }), el('button', { class: 'edit-cancel', text: 'Cancel' }));
    message.append(form);
    text.focus();
  } else if (button.classList.contains('edit-cancel')) {
    message.querySelector('.edit-form')?.remove();
  } else if (button.classList.contains('edit-send')) {
    const content = message.querySelector('.edit-text').value;
    message.querySelector('.edit-form')?.remove();
    backToLive();
    app.session.edit(id, { role: 'user', content }).catch((e) => notice(`Not edited — ${describeError(e)}`, 'error'));
  }
}

/** Shows thread `id`. `mayNotExist`: a thread about to be created by a run
 *  (the run subscribes the page), so "not found" is expected, not news. */
function openThread(id, mayNotExist = false) {
  if (app.session) {
    for (const stop of app.sessionListeners) stop();
    app.session.close();
  }
  app.thread = newThreadView(id);
  $('#thread').hidden = false;
  $('#thread-title').textContent = id;
  // Nothing of the previous thread stays on screen (a new thread has no
  // snapshot to replace it).
  for (const box of ['#notices', '#meta-list', '#timeline tbody', '#conversation', '#state-tree', '#interrupts', '#runs', '#runs-count']) $(box).replaceChildren();
  backToLive();
  $('#run-status').textContent = '';
  $('#active-agent').hidden = true;
  $('#cancel-run').hidden = true;
  $('#timeline-filter').replaceChildren(el('option', { value: '', text: 'all types' }));
  $('#timeline-earlier').hidden = true;
  document.querySelectorAll('.thread-item').forEach((i) => i.classList.toggle('active', i.dataset.thread === id));
  $('#presence').replaceChildren();
  $('#typing').textContent = '';
  writeLocation();
  subscribe(app.thread, mayNotExist);
}

/** Watches the view's thread. Not connected yet: the session subscribes
 *  once the connection is authenticated; after a reconnect it asks for
 *  every event after the last one seen, nothing twice. */
function subscribe(view, mayNotExist = false) {
  app.session = app.conn.session(view.id);
  app.sessionListeners = [
    app.session.on('snapshot', (frame) => { if (app.thread === view) view.snapshot(frame); }),
    app.session.on('event', (frame) => { if (app.thread === view) view.event(frame); }),
    app.session.on('error', (e) => notice(describeError(e), 'error')),
    app.session.on('presence', () => { if (app.thread === view) renderPresence(); }),
  ];
  app.session.subscribe().then(renderPresence, (e) => {
    if (!(mayNotExist && e.code === 'not_found')) notice(`Watching ${view.id} — ${describeError(e)}`, 'error');
  });
}

/** Who is watching the open thread, as avatars (initials; the name, the
 *  user id and how many connections they have on hover). */
function renderPresence() {
  const me = claims(app.token)?.sub;
  const viewers = app.session ? app.session.viewers() : [];
  $('#presence').replaceChildren(...viewers.map((w) => {
    const label = w.name || w.userId;
    const initials = label.split(/[\s._-]+/).filter(Boolean).map((p) => p[0]).join('').slice(0, 2).toUpperCase();
    const tabs = w.connections > 1 ? ` (${w.connections} connections)` : '';
    const typing = w.composing && w.userId !== me ? ' — typing…' : '';
    return el('span', { class: `avatar${w.userId === me ? ' me' : ''}${typing ? ' typing' : ''}`, 'data-user': w.userId, title: `${label}${w.name ? ` — ${w.userId}` : ''}${tabs}${typing}`, text: initials });
  }));
  const typists = viewers.filter((w) => w.composing && w.userId !== me).map((w) => w.name || w.userId);
  $('#typing').textContent = typists.length ? `${typists.join(', ')} ${typists.length > 1 ? 'are' : 'is'} typing…` : '';
}

/** Tells the others this person is typing in the reply box (the session
 *  throttles the repeats), and that they stopped once the box is empty. */
function replyTyped() {
  if (!app.session) return;
  const on = $('#reply-message').value.trim() !== '';
  app.session.composing(on).catch(() => {});
}

/** The open thread (and the run viewed) in the URL, so a link or a reload
 *  opens the same. */
function writeLocation() {
  const params = new URLSearchParams();
  if (app.thread) params.set('thread', app.thread.id);
  if (app.atRun) params.set('run', app.atRun);
  const hash = params.toString();
  history.replaceState(null, '', hash ? `#${hash}` : location.pathname);
}

// ---------- state tree and JSON Patch ----------

function renderState(state) {
  $('#state-tree').replaceChildren(tree(state, 'state'));
}

/** The head's state, unless a run's view is open (its state stays shown). */
function renderLiveState(state) {
  if (!app.atRun) renderState(state);
}

function tree(value, key) {
  if (value !== null && typeof value === 'object') {
    const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
    const node = el('details', { open: '' }, el('summary', {},
      el('span', { class: 'key', text: String(key) }), Array.isArray(value) ? ` [${entries.length}]` : ` {${entries.length}}`));
    for (const [k, v] of entries) node.append(tree(v, k));
    return node;
  }
  return el('div', { class: 'leaf' }, el('span', { class: 'key', text: String(key) }), `: ${JSON.stringify(value)}`);
}

function pointer(path) {
  if (path === '') return [];
  if (!path.startsWith('/')) throw new Error(`bad pointer ${path}`);
  return path.slice(1).split('/').map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** RFC 6902 on a copy of `doc` (all or nothing: `doc` is never touched). */
function applyPatch(doc, ops) {
  let root = structuredClone(doc);
  const parentOf = (parts) => {
    let node = root;
    for (const p of parts.slice(0, -1)) {
      node = node?.[p];
      if (node === undefined || node === null || typeof node !== 'object') throw new Error('missing parent');
    }
    return node;
  };
  const get = (parts) => parts.reduce((node, p) => {
    if (node === undefined || node === null || !(p in Object(node))) throw new Error('missing path');
    return node[p];
  }, root);
  const add = (parts, value) => {
    if (!parts.length) { root = value; return; }
    const parent = parentOf(parts);
    const last = parts[parts.length - 1];
    if (Array.isArray(parent)) parent.splice(last === '-' ? parent.length : Number(last), 0, value);
    else parent[last] = value;
  };
  const remove = (parts) => {
    const parent = parentOf(parts);
    const last = parts[parts.length - 1];
    get(parts);
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  };
  for (const op of ops) {
    const parts = pointer(op.path);
    switch (op.op) {
      case 'add': add(parts, structuredClone(op.value)); break;
      case 'remove': remove(parts); break;
      case 'replace': get(parts); if (parts.length) { remove(parts); add(parts, structuredClone(op.value)); } else root = op.value; break;
      case 'move': { const from = pointer(op.from); const v = get(from); remove(from); add(parts, v); break; }
      case 'copy': add(parts, structuredClone(get(pointer(op.from)))); break;
      case 'test': if (JSON.stringify(get(parts)) !== JSON.stringify(op.value)) throw new Error('test failed'); break;
      default: throw new Error(`unknown op ${op.op}`);
    }
  }
  return root;
}

// ---------- interrupts ----------

function renderInterrupts(view) {
  const box = $('#interrupts');
  box.replaceChildren();
  for (const interrupt of view.interrupts) box.append(interruptForm(view, interrupt));
}

/** What the agent proposes as the answer, by field name: a tool call's
 *  arguments, then the interrupt's `payload` (the older draft, which the
 *  gateway keeps under `metadata.payload`), then its `metadata` — later
 *  ones win. Only names the responseSchema asks for are used. */
function proposedValues(view, interrupt) {
  const args = view.toolArgs(interrupt.toolCallId);
  const sources = [args, interrupt.payload, interrupt.metadata?.payload, interrupt.metadata];
  const proposed = Object.assign({}, ...sources.filter(isObject));
  // pydantic-ai's approval schema edits the call's arguments as one object.
  if (args && proposed.editedArgs === undefined) proposed.editedArgs = args;
  return proposed;
}

/** One input for schema property `name`, pre-filled with `value`; `read()`
 *  gives `[true, value]` when filled in (throws on JSON that does not parse). */
function schemaField(name, prop, value) {
  let input;
  let read;
  if (prop.type === 'boolean') {
    input = el('input', { type: 'checkbox' });
    input.checked = value === true;
    read = () => [true, input.checked];
  } else if (Array.isArray(prop.enum)) {
    input = el('select');
    for (const option of prop.enum) input.append(el('option', { value: String(option), text: String(option) }));
    if (value !== undefined) input.value = String(value);
    read = () => [input.value !== '', prop.enum.find((o) => String(o) === input.value)];
  } else if (prop.type === 'number' || prop.type === 'integer') {
    input = el('input', { type: 'number' });
    if (typeof value === 'number') input.value = String(value);
    read = () => [input.value !== '', Number(input.value)];
  } else if (prop.type === 'string') {
    input = el('input', { type: 'text' });
    if (value !== undefined) input.value = json(value);
    read = () => [input.value !== '', input.value];
  } else {
    input = el('textarea', { rows: '3', placeholder: 'JSON' });
    if (value !== undefined) input.value = JSON.stringify(value, null, 2);
    read = () => [input.value.trim() !== '', input.value.trim() && JSON.parse(input.value)];
  }
  input.dataset.field = name;
  return { name, read, label: el('label', {}, el('span', { text: `${name} ` }), input) };
}

function interruptForm(view, interrupt) {
  const schema = interrupt.responseSchema || {};
  const properties = schema.type === 'object' || isObject(schema.properties) ? schema.properties || {} : null;
  const proposed = proposedValues(view, interrupt);
  const form = el('div', { class: 'interrupt', 'data-interrupt': interrupt.id || '' },
    el('strong', { text: `Waiting for an answer: ${interrupt.reason || 'interrupt'}` }),
    interrupt.message ? el('p', { text: interrupt.message }) : null,
    interrupt.metadata ? el('details', {}, el('summary', { text: 'metadata' }), el('pre', { text: JSON.stringify(interrupt.metadata, null, 2) })) : null,
    interrupt.expiresAt ? el('p', { class: 'hint', text: `answer before ${new Date(interrupt.expiresAt).toLocaleString()}` }) : null);
  // `approved` is what the two buttons say; every other field is editable,
  // pre-filled with what the agent proposed. Without a schema there is
  // nothing to match proposals against: a free JSON answer.
  const fields = properties
    ? Object.entries(properties).filter(([name, prop]) => !(name === 'approved' && prop.type === 'boolean'))
      .map(([name, prop]) => schemaField(name, prop || {}, proposed[name]))
    : [schemaField('payload', {}, undefined)];
  for (const field of fields) form.append(field.label);

  const payload = (approve) => {
    if (!properties) {
      const [given, value] = fields[0].read();
      return given ? value : { approved: approve };
    }
    const out = 'approved' in properties ? { approved: approve } : {};
    for (const field of fields) {
      const [given, value] = field.read();
      if (given) out[field.name] = value;
    }
    return out;
  };
  const answer = async (approve) => {
    let entry;
    try {
      entry = approve || !properties || 'approved' in properties
        ? { interruptId: interrupt.id, status: 'resolved', payload: payload(approve) }
        : { interruptId: interrupt.id, status: 'cancelled' };
    } catch (e) {
      notice(`The answer is not valid JSON: ${e.message}`, 'error');
      return;
    }
    // Every pending interrupt must be answered at once (AG-UI has no partial resume).
    const others = view.interrupts.filter((i) => i.id !== interrupt.id)
      .map((i) => ({ interruptId: i.id, status: approve ? 'resolved' : 'cancelled', payload: { approved: approve } }));
    try {
      await send({ type: 'resume', threadId: view.id, resume: [entry, ...others] });
      form.replaceChildren(el('em', { text: approve ? 'approved — the run continues' : 'rejected — the run continues' }));
    } catch (e) {
      notice(e.code === 'conflict' ? `Someone else answered first (${e.message}).` : `Your answer was not taken — ${describeError(e)}`, 'error');
    }
  };
  const approve = el('button', { class: 'approve', text: 'Approve' });
  const reject = el('button', { class: 'reject', text: 'Reject' });
  approve.addEventListener('click', () => answer(true));
  reject.addEventListener('click', () => answer(false));
  form.append(el('div', { class: 'row' }, approve, reject));
  return form;
}

// ---------- meta, timeline, notices ----------

function renderMeta(e) {
  const payload = e.payload || {};
  const what = e.metaType === 'note' ? `: ${payload.text ?? ''}` : e.metaType === 'tags' ? `: ${(payload.tags || []).join(', ')}` : '';
  $('#meta-list').append(el('li', { class: 'meta-item', 'data-meta-type': e.metaType || '' },
    `${new Date(e.timestamp || Date.now()).toLocaleTimeString()} ${payload.userId || '?'} — ${e.metaType}${what}`));
}

/** What a timeline row says besides its type: who a handoff passed the
 *  thread to (the row is marked), the agent a run is of. */
function timelineNote(e, view = null) {
  const v = e.value || {};
  if (e.type === 'CUSTOM' && e.name === 'agui-gateway/handoff') {
    return { mark: 'handoff', text: `handoff ${v.fromAgent || '?'} → ${v.toAgent || '?'} (${v.result || '?'})` };
  }
  if (e.type === 'CUSTOM' && e.name === 'agui-gateway/active-agent') return { mark: 'handoff', text: `switched to ${v.agent || '?'}${v.by ? ` by ${v.by}` : ''}` };
  if (e.type === 'CUSTOM' && e.name === 'agui-gateway/lineage') {
    const what = v.regeneratedMessageId ? ` (regenerates ${v.regeneratedMessageId})` : v.editedMessageId ? ` (edits ${v.editedMessageId})` : '';
    return { mark: 'lineage', text: `${v.kind || 'branch'} of ${v.parentRunId || 'the start'}${what}` };
  }
  if (e.type === 'CUSTOM' && e.name === 'agui-gateway/policy') {
    const subject = v.toolName ? ` ${v.toolName}` : v.toAgent ? ` → ${v.toAgent}` : '';
    return { mark: 'policy', text: `policy: ${(v.action || '?').replaceAll('_', ' ')}${subject}${v.rule ? ` (rule ${v.rule})` : ''}${v.reason ? ` — ${v.reason}` : ''}` };
  }
  if (e.type === 'META') return { text: `${e.metaType || 'meta'} by ${e.payload?.userId || '?'}` };
  const stamp = e['agui-gateway'] || {};
  if (e.type === 'RUN_STARTED') {
    if (view) view.runStarted = { runId: e.runId, at: e.timestamp || Date.now() };
    const by = stamp.by ? ` · by ${stamp.by}` : '';
    return stamp.agent ? { text: `${stamp.agent}${stamp.kind === 'handoff' ? ' (handoff)' : ''}${by}` } : (by ? { text: by.slice(3) } : null);
  }
  if ((e.type === 'RUN_FINISHED' || e.type === 'RUN_ERROR') && view?.runStarted && e.timestamp) {
    return { text: `took ${e.timestamp - view.runStarted.at} ms` };
  }
  return null;
}

/** `time` as hh:mm:ss.mmm (the timeline tells events apart by the millisecond). */
function clock(time) {
  const d = new Date(time);
  return `${d.toLocaleTimeString([], { hour12: false })}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

/** "load earlier events": a late joiner's timeline gets the events before
 *  its snapshot, read back through a second connection subscribed from
 *  seq 0 (closed once it reached the snapshot). A journal compacted past
 *  them answers with a snapshot instead: said so. */
async function loadEarlier() {
  const view = app.thread;
  const until = view?.snapshotSeq;
  if (!until) return;
  $('#timeline-earlier').hidden = true;
  const conn = new GatewayConnection({ url: `${location.origin}/v1/ws`, token: () => app.token, autoRefresh: false });
  const anchor = document.querySelector('#timeline tbody .tl-row');
  try {
    await conn.connect();
    const earlier = conn.session(view.id);
    earlier.seq = 0; // subscribes `after: 0`: every event from the first
    const readBack = { runStarted: null };
    await new Promise((resolve, reject) => {
      earlier.on('reset', () => reject(new Error('the journal no longer holds them (compacted)')));
      earlier.on('event', ({ seq, event }) => {
        if (seq <= until && app.thread === view) {
          timelineRow(seq, event.type, event.timestamp || Date.now(), JSON.stringify(event).length, false, timelineNote(event, readBack), event, anchor);
        }
        if (seq >= until) resolve();
      });
      earlier.subscribe().catch(reject);
    });
  } catch (e) {
    notice(`Earlier events were not loaded — ${e.message || describeError(e)}`, 'error');
  } finally {
    conn.close();
  }
}

function timelineRow(seq, type, time, bytes, gap, note = null, event = null, before = null) {
  const view = app.thread;
  const filter = $('#timeline-filter');
  if (view && !view.types.has(type)) {
    view.types.add(type);
    filter.append(el('option', { value: type, text: type }));
  }
  const row = el('tr', { class: `tl-row${gap ? ' gap' : ''}${note?.mark ? ` ${note.mark}` : ''}`, 'data-seq': String(seq), 'data-type': type },
    el('td', { text: String(seq) }), el('td', { text: note ? `${type} · ${note.text}` : type }),
    el('td', { text: clock(time) }), el('td', { text: String(bytes) }));
  row.hidden = filter.value !== '' && filter.value !== type;
  // A row opens to its event's JSON (and closes again).
  if (event) {
    row.classList.add('opens');
    row.addEventListener('click', () => {
      const open = row.nextElementSibling?.classList.contains('tl-json') ? row.nextElementSibling : null;
      if (open) open.remove();
      else row.after(el('tr', { class: 'tl-json', 'data-seq': String(seq) }, el('td', { colspan: '4' }, el('pre', { text: JSON.stringify(event, null, 2) }))));
    });
  }
  const body = $('#timeline tbody');
  if (before?.isConnected) body.insertBefore(row, before);
  else following(body, () => body.append(row));
}

/** Runs `change` on scrolling box `box` and keeps its newest content in
 *  view, as a log viewer does — unless the person scrolled up to read, who
 *  is left where they are. */
function following(box, change) {
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight <= FOLLOW_SLACK_PX;
  change();
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function notice(text, kind = '', where = null) {
  const box = where || $('#notices');
  box.append(el('div', { class: `notice ${kind}`, text }));
}

async function postMeta(metaType, payload) {
  if (!app.thread) return;
  try {
    await send({ type: 'meta', threadId: app.thread.id, metaType, payload, clientEventId: crypto.randomUUID() });
  } catch (e) {
    notice(`Your ${metaType.replace('_', ' ')} was not posted — ${describeError(e)}`, 'error');
  }
}

// ---------- wiring ----------

/** "Continue from this run": the reply box's text as a run from the end
 *  of the run viewed (a branch; the live view then follows it, the new head). */
async function continueFromRun() {
  const view = app.thread;
  const base = app.atRun;
  if (!view || !base) return;
  const text = $('#reply-message').value.trim();
  const messages = text ? [{ id: `m-${crypto.randomUUID()}`, role: 'user', content: text }] : [];
  try {
    await send({ type: 'run', threadId: view.id, runId: `r-${crypto.randomUUID()}`, parentRunId: base, messages });
    $('#reply-message').value = '';
    backToLive();
  } catch (e) {
    notice(`The run from ${base} did not start — ${describeError(e)}`, 'error');
  }
}

async function startRun(threadId, text) {
  // A thread that has run goes on with its active agent (the gateway
  // routes a run that names none, after a handoff too); the picker is for
  // new threads.
  const going = app.thread?.id === threadId && (app.thread.run || app.session?.latestRun);
  const agent = going ? undefined : $('#agent-select').value || app.thread?.run?.agent;
  const thread = threadId || `t-${crypto.randomUUID().slice(0, 8)}`;
  const runId = `r-${crypto.randomUUID()}`;
  const messages = text ? [{ id: `m-${crypto.randomUUID()}`, role: 'user', content: text }] : [];
  if (app.thread?.id !== thread) openThread(thread, true);
  try {
    await send({ type: 'run', agent, threadId: thread, runId, messages });
    loadThreads(true);
  } catch (e) {
    notice(`The run did not start — ${describeError(e)}`, 'error');
  }
}

document.addEventListener('DOMContentLoaded', async () => {
  $('#signin-button').addEventListener('click', () => signIn($('#signin-token').value.trim(), null));
  $('#sign-out').addEventListener('click', signOut);
  $('#dev-mint-button').addEventListener('click', async () => {
    const sub = $('#dev-sub').value.trim();
    const roles = $('#dev-roles').value.split(',').map((r) => r.trim()).filter(Boolean);
    const token = await mintDev(sub, roles);
    if (token) signIn(token, { sub, roles });
  });
  $('#token-replace-send').addEventListener('click', () => replaceToken($('#token-replace').value.trim()));
  $('#run-start').addEventListener('click', () => startRun($('#run-thread').value.trim(), $('#run-message').value.trim()));
  $('#reply-send').addEventListener('click', () => {
    if (app.thread) startRun(app.thread.id, $('#reply-message').value.trim());
    $('#reply-message').value = '';
    replyTyped();
  });
  $('#reply-message').addEventListener('input', replyTyped);
  $('#cancel-run').addEventListener('click', () => {
    if (!app.thread) return;
    send({ type: 'cancel', threadId: app.thread.id, runId: app.thread.runId })
      .catch((e) => notice(`The run was not cancelled — ${describeError(e)}`, 'error'));
  });
  $('#thumbs-up').addEventListener('click', () => postMeta('thumbs_up', {}));
  $('#thumbs-down').addEventListener('click', () => postMeta('thumbs_down', {}));
  $('#note-send').addEventListener('click', () => { postMeta('note', { text: $('#note-text').value }); $('#note-text').value = ''; });
  $('#tags-send').addEventListener('click', () => {
    postMeta('tags', { tags: $('#tags-text').value.split(',').map((t) => t.trim()).filter(Boolean) });
    $('#tags-text').value = '';
  });
  $('#threads-refresh').addEventListener('click', () => loadThreads(true));
  $('#conversation').addEventListener('click', messageAction);
  $('#conversation-at').addEventListener('click', messageAction);
  $('#run-view-live').addEventListener('click', backToLive);
  $('#run-continue').addEventListener('click', continueFromRun);
  $('#timeline-earlier').addEventListener('click', loadEarlier);
  $('#runs').addEventListener('click', (e) => {
    const item = e.target.closest('.run-item');
    if (item && e.target.closest('button')) viewAtRun(item.dataset.run);
  });
  $('#threads-more').addEventListener('click', () => loadThreads(false));
  $('#filter-agent').addEventListener('change', () => loadThreads(true));
  $('#filter-status').addEventListener('change', () => loadThreads(true));
  $('#timeline-filter').addEventListener('change', () => {
    const type = $('#timeline-filter').value;
    document.querySelectorAll('.tl-row').forEach((row) => { row.hidden = type !== '' && row.dataset.type !== type; });
  });
  try {
    const config = await (await fetch('config.json')).json();
    $('#dev-mint').hidden = !config.devTokens;
  } catch {
    /* no dev tokens */
  }
  if (app.token && claims(app.token)?.exp * 1000 > Date.now()) signIn(app.token, app.dev);
  // A link or a reload: the thread the URL names, else the one that was open.
  const linked = new URLSearchParams(location.hash.slice(1)).get('thread');
  const open = linked || sessionStorage.getItem('agui-inspector.thread');
  if (open && app.token) {
    openThread(open, true);
    const run = linked && new URLSearchParams(location.hash.slice(1)).get('run');
    if (run) app.session.whenReady().then(() => viewAtRun(run), () => {});
  }
  window.addEventListener('beforeunload', () => {
    if (app.thread) sessionStorage.setItem('agui-inspector.thread', app.thread.id);
  });
});
