// agui-gateway inspector. Speaks only the public contract: the WebSocket
// `/v1/ws` and the HTTP routes. Everything an agent or another person wrote
// is untrusted: it is only ever put into the page as text (textContent,
// text nodes), never as HTML.
'use strict';

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

const TOKEN_KEY = 'agui-inspector.token';
const DEV_KEY = 'agui-inspector.dev';

const app = {
  token: sessionStorage.getItem(TOKEN_KEY),
  dev: JSON.parse(sessionStorage.getItem(DEV_KEY) || 'null'),
  ws: null,
  backoff: 250,
  nextId: 1,
  pending: new Map(),
  thread: null,
  threadsCursor: null,
  refreshTimer: null,
};

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
  app.token = token;
  app.dev = dev || null;
  sessionStorage.setItem(TOKEN_KEY, token);
  sessionStorage.setItem(DEV_KEY, JSON.stringify(app.dev));
  $('#signin').hidden = true;
  $('#app').hidden = false;
  $('#sign-out').hidden = false;
  $('#who').textContent = `${c.sub || '?'}${c.tenant ? ' @ ' + c.tenant : ''}`;
  scheduleRefresh();
  connect();
  loadAgents();
  loadThreads(true);
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(DEV_KEY);
  location.reload();
}

/** Renews the token a minute before it expires: dev tokens are minted
 *  again; a pasted one can only be replaced by the person. */
function scheduleRefresh() {
  clearTimeout(app.refreshTimer);
  const exp = claims(app.token)?.exp;
  if (!exp) return;
  const wait = Math.max(5_000, exp * 1000 - Date.now() - 60_000);
  app.refreshTimer = setTimeout(async () => {
    if (!app.dev) {
      notice('Your token expires within a minute: sign out and paste a new one.', 'error');
      return;
    }
    const fresh = await mintDev(app.dev.sub, app.dev.roles);
    if (!fresh) return;
    app.token = fresh;
    sessionStorage.setItem(TOKEN_KEY, fresh);
    send({ type: 'auth', token: fresh });
    scheduleRefresh();
  }, wait);
}

async function mintDev(sub, roles) {
  const response = await fetch('dev-token', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ sub, roles }),
  });
  const body = await response.json();
  if (!response.ok) {
    notice(body.error?.message || 'could not mint a token', 'error', $('#signin'));
    return null;
  }
  return body.token;
}

// ---------- HTTP ----------

async function api(path) {
  const response = await fetch(path, { headers: { authorization: `Bearer ${app.token}` } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error?.message || `${response.status}`);
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
    notice(`agents: ${e.message}`, 'error');
  }
}

async function loadThreads(fresh) {
  if (fresh) app.threadsCursor = null;
  const query = new URLSearchParams();
  if ($('#filter-agent').value) query.set('agent', $('#filter-agent').value);
  if ($('#filter-status').value) query.set('status', $('#filter-status').value);
  if (app.threadsCursor) query.set('cursor', app.threadsCursor);
  try {
    const { threads, nextCursor } = await api(`/v1/threads?${query}`);
    const list = $('#threads');
    if (fresh) list.replaceChildren();
    for (const t of threads) {
      const when = new Date(t.updatedMs).toLocaleTimeString();
      const viewers = t.viewers === undefined ? '' : ` · ${t.viewers} watching`;
      const item = el(
        'li',
        { class: 'thread-item', 'data-thread': t.threadId },
        el('strong', { text: t.threadId }),
        el('small', { text: `${t.agent || 'no agent'} · ${t.status} · ${when}${viewers}` }),
      );
      item.addEventListener('click', () => openThread(t.threadId));
      if (app.thread?.id === t.threadId) item.classList.add('active');
      list.append(item);
    }
    app.threadsCursor = nextCursor;
    $('#threads-more').hidden = nextCursor === null || nextCursor === undefined;
  } catch (e) {
    notice(`threads: ${e.message}`, 'error');
  }
}

// ---------- WebSocket ----------

function connect() {
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws`;
  const ws = new WebSocket(url);
  app.ws = ws;
  ws.addEventListener('open', () => {
    // The token travels in the first frame, never in the URL.
    ws.send(JSON.stringify({ type: 'auth', token: app.token, id: 'auth' }));
  });
  ws.addEventListener('message', (message) => {
    let frame;
    try {
      frame = JSON.parse(message.data);
    } catch {
      return;
    }
    onFrame(frame);
  });
  ws.addEventListener('close', (event) => {
    setStatus(false);
    if (app.ws !== ws) return;
    if (event.code === 4001) {
      notice(`signed out by the gateway: ${event.reason}`, 'error');
      return;
    }
    // Reconnect and resume from the last seq seen: nothing lost, nothing twice.
    setTimeout(connect, app.backoff);
    app.backoff = Math.min(app.backoff * 2, 5000);
  });
}

function setStatus(on) {
  const status = $('#conn-status');
  status.textContent = on ? 'live' : 'reconnecting…';
  status.className = `pill ${on ? 'on' : 'off'}`;
}

/** Sends a command; resolves with its ack, rejects with its error. */
function send(command) {
  const id = command.id || `c${app.nextId++}`;
  command.id = id;
  return new Promise((resolve, reject) => {
    app.pending.set(id, { resolve, reject });
    if (app.ws?.readyState === WebSocket.OPEN) app.ws.send(JSON.stringify(command));
    else reject(new Error('not connected'));
  });
}

function onFrame(frame) {
  if (frame.type === 'ack' && frame.id === 'auth') {
    app.backoff = 250;
    setStatus(true);
    if (app.thread) subscribe(app.thread);
    return;
  }
  if ((frame.type === 'ack' || frame.type === 'error') && frame.id && app.pending.has(frame.id)) {
    const { resolve, reject } = app.pending.get(frame.id);
    app.pending.delete(frame.id);
    if (frame.type === 'ack') resolve(frame);
    else reject(Object.assign(new Error(frame.message), { code: frame.code }));
    return;
  }
  if (frame.type === 'error') {
    notice(`${frame.code}: ${frame.message}`, 'error');
    return;
  }
  const view = app.thread;
  if (!view || frame.threadId !== view.id) return;
  if (frame.type === 'snapshot') view.snapshot(frame);
  else if (frame.type === 'event') view.event(frame);
}

// ---------- a thread ----------

function newThreadView(id) {
  return {
    id,
    lastSeq: null,
    messages: new Map(),
    tools: new Map(),
    reasoning: new Map(),
    state: {},
    interrupts: [],
    run: null,
    types: new Set(),

    snapshot(frame) {
      if (frame.reset) notice(`Reset: the journal no longer holds what followed seq ${this.lastSeq ?? 0}; showing the snapshot at seq ${frame.seq}.`, 'gap');
      this.lastSeq = frame.seq;
      this.messages.clear();
      this.tools.clear();
      $('#conversation').replaceChildren();
      for (const message of frame.messages || []) this.renderMessage(message);
      this.state = frame.state ?? {};
      renderState(this.state);
      this.run = frame.run;
      this.setRun(frame.run?.status || 'idle', frame.run?.runId);
      this.interrupts = frame.interrupts || [];
      renderInterrupts(this);
      timelineRow(frame.seq, frame.reset ? 'snapshot (reset)' : 'snapshot', Date.now(), JSON.stringify(frame).length, frame.reset);
    },

    event(frame) {
      const event = frame.event;
      if (this.lastSeq !== null && frame.seq <= this.lastSeq) return; // seen already
      const gap = this.lastSeq !== null && frame.seq !== this.lastSeq + 1;
      if (gap) notice(`Gap: seq ${this.lastSeq + 1}–${frame.seq - 1} never arrived.`, 'gap');
      this.lastSeq = frame.seq;
      timelineRow(frame.seq, event.type, event.timestamp || Date.now(), JSON.stringify(event).length, gap);
      this.apply(event);
    },

    setRun(status, runId) {
      const pill = $('#run-status');
      pill.textContent = runId ? `${status} · ${runId}` : status;
      $('#cancel-run').hidden = status !== 'running';
      this.runId = runId;
    },

    apply(e) {
      const conversation = $('#conversation');
      switch (e.type) {
        case 'RUN_STARTED':
          this.setRun('running', e.runId);
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
          this.message(e.messageId, e.role || 'assistant');
          break;
        case 'TEXT_MESSAGE_CONTENT':
        case 'TEXT_MESSAGE_CHUNK':
          this.message(e.messageId, e.role || 'assistant').body.append(e.delta || '');
          break;
        case 'REASONING_START':
        case 'THINKING_START':
          break;
        case 'REASONING_MESSAGE_START':
        case 'THINKING_TEXT_MESSAGE_START':
          this.thinking(e.messageId || 'thinking');
          break;
        case 'REASONING_MESSAGE_CONTENT':
        case 'REASONING_MESSAGE_CHUNK':
        case 'THINKING_TEXT_MESSAGE_CONTENT':
          this.thinking(e.messageId || 'thinking').append(e.delta || '');
          break;
        case 'TOOL_CALL_START':
        case 'TOOL_CALL_CHUNK':
          this.tool(e.toolCallId, e.toolCallName).args.append(e.delta || '');
          break;
        case 'TOOL_CALL_ARGS':
          this.tool(e.toolCallId).args.append(e.delta || '');
          break;
        case 'TOOL_CALL_RESULT':
          this.tool(e.toolCallId).result.textContent = `→ ${typeof e.content === 'string' ? e.content : JSON.stringify(e.content)}`;
          break;
        case 'STATE_SNAPSHOT':
          this.state = e.snapshot ?? {};
          renderState(this.state);
          break;
        case 'STATE_DELTA':
          try {
            this.state = applyPatch(this.state, e.delta || []);
            renderState(this.state);
          } catch (err) {
            notice(`state delta did not apply (${err.message}); re-reading the snapshot`, 'error');
            api(`/v1/threads/${encodeURIComponent(this.id)}`).then((s) => { this.state = s.state; renderState(s.state); });
          }
          break;
        case 'MESSAGES_SNAPSHOT':
          this.messages.clear();
          this.tools.clear();
          conversation.replaceChildren();
          for (const message of e.messages || []) this.renderMessage(message);
          break;
        case 'STEP_STARTED':
        case 'STEP_FINISHED':
          conversation.append(el('div', { class: 'marker', text: `${e.type === 'STEP_STARTED' ? '▶' : '■'} ${e.stepName || ''}` }));
          break;
        case 'META':
          renderMeta(e);
          break;
        case 'CUSTOM':
          if (e.name === 'agui-gateway/policy') notice(`policy: ${JSON.stringify(e.value)}`);
          else conversation.append(el('div', { class: 'activity', text: `${e.name}: ${JSON.stringify(e.value)}` }));
          break;
        default:
          if (/^(ACTIVITY|SUBAGENT)_/.test(e.type)) {
            conversation.append(el('div', { class: 'activity', text: `${e.type}: ${JSON.stringify(e.content ?? e.patch ?? e)}` }));
          }
      }
      conversation.scrollTop = conversation.scrollHeight;
    },

    message(id, role) {
      let message = this.messages.get(id);
      if (!message) {
        const body = el('span', { class: 'body' });
        const node = el('div', { class: 'msg', 'data-role': role, 'data-id': id || '' }, el('span', { class: 'role', text: role }), body);
        $('#conversation').append(node);
        message = { node, body };
        this.messages.set(id, message);
      }
      return message;
    },

    thinking(id) {
      let body = this.reasoning.get(id);
      if (!body) {
        body = el('span');
        $('#conversation').append(el('details', { class: 'reasoning' }, el('summary', { text: 'reasoning' }), body));
        this.reasoning.set(id, body);
      }
      return body;
    },

    tool(id, name) {
      let tool = this.tools.get(id);
      if (!tool) {
        const args = el('span', { class: 'args' });
        const result = el('div', { class: 'result' });
        $('#conversation').append(el('div', { class: 'tool', 'data-tool': id || '' }, el('span', { class: 'name', text: `tool ${name || '?'}(` }), args, ')', result));
        tool = { args, result };
        this.tools.set(id, tool);
      }
      return tool;
    },

    renderMessage(m) {
      if (m.role === 'tool') {
        this.tool(m.toolCallId).result.textContent = `→ ${typeof m.content === 'string' ? m.content : JSON.stringify(m.content)}`;
        return;
      }
      if (m.role === 'reasoning') {
        this.thinking(m.id).append(textOf(m.content));
        return;
      }
      const text = textOf(m.content);
      if (text || !(m.toolCalls || []).length) this.message(m.id, m.role || 'assistant').body.append(text);
      for (const call of m.toolCalls || []) this.tool(call.id, call.function?.name).args.append(call.function?.arguments || '');
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

function openThread(id) {
  if (app.thread && app.ws?.readyState === WebSocket.OPEN) {
    app.ws.send(JSON.stringify({ type: 'unsubscribe', threadId: app.thread.id }));
  }
  app.thread = newThreadView(id);
  $('#thread').hidden = false;
  $('#thread-title').textContent = id;
  $('#notices').replaceChildren();
  $('#meta-list').replaceChildren();
  $('#timeline tbody').replaceChildren();
  $('#timeline-filter').replaceChildren(el('option', { value: '', text: 'all types' }));
  document.querySelectorAll('.thread-item').forEach((i) => i.classList.toggle('active', i.dataset.thread === id));
  subscribe(app.thread);
}

function subscribe(view) {
  // Not connected yet: the connection subscribes once it is authenticated.
  if (app.ws?.readyState !== WebSocket.OPEN) return;
  const frame = { type: 'subscribe', threadId: view.id };
  // After a reconnect: every event after the last one seen, nothing twice.
  if (view.lastSeq !== null) frame.after = view.lastSeq;
  send(frame).catch((e) => notice(`subscribe: ${e.message}`, 'error'));
}

// ---------- state tree and JSON Patch ----------

function renderState(state) {
  $('#state-tree').replaceChildren(tree(state, 'state'));
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

/** RFC 6902 on a copy of `doc`. */
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

function interruptForm(view, interrupt) {
  const schema = interrupt.responseSchema || {};
  const fields = [];
  const form = el('div', { class: 'interrupt', 'data-interrupt': interrupt.id || '' },
    el('strong', { text: `Waiting for an answer: ${interrupt.reason || 'interrupt'}` }),
    interrupt.message ? el('p', { text: interrupt.message }) : null,
    el('pre', { text: JSON.stringify(interrupt.metadata ?? interrupt.payload ?? {}, null, 2) }));
  const properties = schema.type === 'object' ? schema.properties || {} : null;
  if (properties) {
    for (const [name, prop] of Object.entries(properties)) {
      let input;
      if (prop.type === 'boolean') input = el('input', { type: 'checkbox' });
      else if (prop.type === 'number' || prop.type === 'integer') input = el('input', { type: 'number' });
      else if (Array.isArray(prop.enum)) {
        input = el('select');
        for (const option of prop.enum) input.append(el('option', { value: String(option), text: String(option) }));
      } else if (prop.type === 'string') input = el('input', { type: 'text' });
      else input = el('textarea', { rows: '2', placeholder: 'JSON' });
      input.dataset.field = name;
      fields.push([name, prop, input]);
      form.append(el('label', {}, `${name} `, input));
    }
  } else {
    const input = el('textarea', { rows: '3', placeholder: 'answer payload (JSON)' });
    fields.push([null, {}, input]);
    form.append(input);
  }
  const payload = (approve) => {
    if (!properties) {
      const raw = fields[0][2].value.trim();
      return raw ? JSON.parse(raw) : { approved: approve };
    }
    const out = {};
    for (const [name, prop, input] of fields) {
      if (prop.type === 'boolean') out[name] = name === 'approved' ? approve : input.checked;
      else if (prop.type === 'number' || prop.type === 'integer') { if (input.value !== '') out[name] = Number(input.value); }
      else if (prop.type === 'string' || Array.isArray(prop.enum)) { if (input.value !== '') out[name] = input.value; }
      else if (input.value.trim()) out[name] = JSON.parse(input.value);
    }
    return out;
  };
  const answer = async (approve) => {
    let entry;
    try {
      const hasApproved = properties && 'approved' in properties;
      entry = approve || hasApproved || !properties
        ? { interruptId: interrupt.id, status: 'resolved', payload: payload(approve) }
        : { interruptId: interrupt.id, status: 'cancelled' };
    } catch (e) {
      notice(`the answer is not valid JSON: ${e.message}`, 'error');
      return;
    }
    // Every pending interrupt must be answered at once (AG-UI has no partial resume).
    const others = view.interrupts.filter((i) => i.id !== interrupt.id)
      .map((i) => ({ interruptId: i.id, status: approve ? 'resolved' : 'cancelled', payload: { approved: approve } }));
    try {
      await send({ type: 'resume', threadId: view.id, resume: [entry, ...others] });
      form.replaceChildren(el('em', { text: approve ? 'approved — the run continues' : 'rejected — the run continues' }));
    } catch (e) {
      const text = e.code === 'conflict' ? `Someone else answered first (${e.message}).` : `${e.code || 'error'}: ${e.message}`;
      notice(text, 'error');
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

function timelineRow(seq, type, time, bytes, gap) {
  const app_ = app.thread;
  const filter = $('#timeline-filter');
  if (app_ && !app_.types.has(type)) {
    app_.types.add(type);
    filter.append(el('option', { value: type, text: type }));
  }
  const row = el('tr', { class: `tl-row${gap ? ' gap' : ''}`, 'data-seq': String(seq), 'data-type': type },
    el('td', { text: String(seq) }), el('td', { text: type }),
    el('td', { text: new Date(time).toLocaleTimeString() }), el('td', { text: String(bytes) }));
  row.hidden = filter.value !== '' && filter.value !== type;
  $('#timeline tbody').append(row);
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
    notice(`${metaType}: ${e.message}`, 'error');
  }
}

// ---------- wiring ----------

async function startRun(threadId, text) {
  const agent = $('#agent-select').value || app.thread?.run?.agent;
  const thread = threadId || `t-${crypto.randomUUID().slice(0, 8)}`;
  const runId = `r-${crypto.randomUUID()}`;
  const messages = text ? [{ id: `m-${crypto.randomUUID()}`, role: 'user', content: text }] : [];
  if (app.thread?.id !== thread) openThread(thread);
  try {
    await send({ type: 'run', agent, threadId: thread, runId, messages });
    loadThreads(true);
  } catch (e) {
    notice(`run: ${e.code || ''} ${e.message}`, 'error');
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
  $('#run-start').addEventListener('click', () => startRun($('#run-thread').value.trim(), $('#run-message').value.trim()));
  $('#reply-send').addEventListener('click', () => {
    if (app.thread) startRun(app.thread.id, $('#reply-message').value.trim());
    $('#reply-message').value = '';
  });
  $('#cancel-run').addEventListener('click', () => {
    if (app.thread) send({ type: 'cancel', threadId: app.thread.id, runId: app.thread.runId }).catch((e) => notice(`cancel: ${e.message}`, 'error'));
  });
  $('#thumbs-up').addEventListener('click', () => postMeta('thumbs_up', {}));
  $('#thumbs-down').addEventListener('click', () => postMeta('thumbs_down', {}));
  $('#note-send').addEventListener('click', () => { postMeta('note', { text: $('#note-text').value }); $('#note-text').value = ''; });
  $('#tags-send').addEventListener('click', () => {
    postMeta('tags', { tags: $('#tags-text').value.split(',').map((t) => t.trim()).filter(Boolean) });
    $('#tags-text').value = '';
  });
  $('#threads-refresh').addEventListener('click', () => loadThreads(true));
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
  // A reload mid-run: reopen the thread that was open.
  const open = sessionStorage.getItem('agui-inspector.thread');
  if (open && app.token) openThread(open);
  window.addEventListener('beforeunload', () => {
    if (app.thread) sessionStorage.setItem('agui-inspector.thread', app.thread.id);
  });
});
