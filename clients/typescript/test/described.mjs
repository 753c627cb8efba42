// Real answers of a running gateway checked against the descriptions in
// docs/: each HTTP route's status and JSON body against docs/openapi.json
// (the document the gateway serves), and every WebSocket frame a session
// sends and receives against docs/ws-protocol.schema.json.
// usage: node described.mjs <base> <token> <agent>
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import { connect, main, userMessage } from './util.mjs';

const [base, token, agent] = process.argv.slice(2);
const docs = new URL('../../../docs/', import.meta.url);
const wsSchema = JSON.parse(readFileSync(new URL('ws-protocol.schema.json', docs)));

const pointer = (...parts) => parts.map((p) => String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('/');

main(async (out) => {
  const served = await (await fetch(`${base}/v1/openapi.json`)).json();
  const onDisk = JSON.parse(readFileSync(new URL('openapi.json', docs)));
  out.servedIsDocs = JSON.stringify(served) === JSON.stringify(onDisk);
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajv.addSchema(served, 'openapi');
  ajv.addSchema(wsSchema, 'ws');
  const failures = [];
  const checked = [];

  /** Checks one exchange against the document: the status must be
   *  documented for the route, and a JSON body must match its schema. */
  async function http(method, path, template, { body, auth = true, expect } = {}) {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { ...(auth ? { authorization: `Bearer ${token}` } : {}), ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const status = String(response.status);
    const operation = served.paths[template]?.[method.toLowerCase()];
    const name = `${method} ${path} → ${status}`;
    checked.push(name);
    if (expect && status !== String(expect)) failures.push(`${name}: expected ${expect}`);
    if (!operation) return failures.push(`${name}: ${method} ${template} is not in the document`);
    if (body && operation.requestBody) {
      const validate = ajv.getSchema(`openapi#/${pointer('paths', template, method.toLowerCase(), 'requestBody', 'content', 'application/json', 'schema')}`);
      if (!validate(body)) failures.push(`${name} request: ${ajv.errorsText(validate.errors)}`);
    }
    let answer = operation.responses[status];
    if (!answer) return failures.push(`${name}: status ${status} is not documented`);
    let where = pointer('paths', template, method.toLowerCase(), 'responses', status);
    if (answer.$ref) {
      where = answer.$ref.slice(2);
      answer = answer.$ref.slice(2).split('/').reduce((node, key) => node[key.replace(/~1/g, '/').replace(/~0/g, '~')], served);
    }
    const type = response.headers.get('content-type') || '';
    if (type.startsWith('application/json') && answer.content?.['application/json']) {
      const json = await response.json();
      const validate = ajv.getSchema(`openapi#/${where}/${pointer('content', 'application/json', 'schema')}`);
      if (!validate(json)) failures.push(`${name}: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(json).slice(0, 300)}`);
    } else {
      await response.arrayBuffer();
      const documented = Object.keys(answer.content || {});
      if (documented.length && !documented.some((t) => type.startsWith(t))) failures.push(`${name}: content-type ${type} not documented (${documented})`);
    }
    return undefined;
  }

  // A thread to look at, made by a WebSocket session whose frames are all checked.
  const conn = connect(base, token);
  const frames = [];
  const rawSend = conn.send.bind(conn);
  conn.send = (command) => {
    frames.push(['command', { ...command, id: command.id ?? 'x' }]);
    return rawSend(command);
  };
  conn.on('frame', (frame) => frames.push(['reply', frame]));
  await conn.connect();
  const thread = `described-${Date.now()}`;
  const session = conn.session(thread);
  const ended = session.runEnded('d1');
  await session.run({ agent, runId: 'd1', messages: [userMessage('d-m1', 'hello')] });
  await ended;
  await session.meta('note', { text: 'hi' }, 'once');
  await session.meta('note', { text: 'hi' }, 'once');
  await session.run({ agent, runId: 'd1' }).catch(() => {});
  await conn.send({ type: 'ping' });
  await session.unsubscribe();
  await session.subscribe();
  const fresh = new Promise((resolve) => { const stop = session.on('snapshot', () => { stop(); resolve(); }); });
  session.resync();
  await fresh;
  conn.close();
  const command = ajv.getSchema('ws#/$defs/command');
  const reply = ajv.getSchema('ws#/$defs/reply');
  const kinds = new Set();
  for (const [side, frame] of frames) {
    const validate = side === 'command' ? command : reply;
    kinds.add(`${side}:${frame.type}${frame.type === 'event' ? `:${frame.event.type}` : ''}`);
    if (!validate(frame)) failures.push(`ws ${side} ${JSON.stringify(frame).slice(0, 200)}: ${ajv.errorsText(validate.errors)}`);
  }
  out.wsFrames = frames.length;
  out.wsKinds = [...kinds].filter((k) => !k.startsWith('reply:event:')).sort();

  const t = encodeURIComponent(thread);
  await http('GET', '/healthz', '/healthz', { auth: false, expect: 200 });
  await http('GET', '/readyz', '/readyz', { auth: false, expect: 200 });
  await http('GET', '/metrics', '/metrics', { auth: false, expect: 200 });
  await http('GET', '/v1/openapi.json', '/v1/openapi.json', { auth: false, expect: 200 });
  await http('GET', '/v1/agents', '/v1/agents', { expect: 200 });
  await http('GET', '/v1/agents', '/v1/agents', { auth: false, expect: 401 });
  await http('GET', '/v1/threads', '/v1/threads', { expect: 200 });
  await http('GET', '/v1/threads?limit=many', '/v1/threads', { expect: 400 });
  await http('GET', `/v1/threads/${t}`, '/v1/threads/{threadId}', { expect: 200 });
  await http('GET', '/v1/threads/nobody-has-this', '/v1/threads/{threadId}', { expect: 404 });
  await http('GET', `/v1/threads/${t}/messages?format=ai-sdk`, '/v1/threads/{threadId}/messages', { expect: 200 });
  await http('POST', `/v1/threads/${t}/ticket`, '/v1/threads/{threadId}/ticket', { expect: 200 });
  await http('POST', `/v1/threads/${t}/meta`, '/v1/threads/{threadId}/meta', { body: { metaType: 'note', payload: { text: 'via http' }, clientEventId: 'h1' }, expect: 200 });
  await http('POST', `/v1/threads/${t}/cancel`, '/v1/threads/{threadId}/cancel', { body: {} });
  await http('POST', `/v1/agents/${agent}/run`, '/v1/agents/{agent}/run', {
    body: { threadId: thread, runId: 'd2', messages: [userMessage('d-m2', 'over http')], tools: [], context: [] }, expect: 200,
  });
  await http('POST', `/v1/agents/${agent}/run`, '/v1/agents/{agent}/run', { body: { threadId: thread, runId: 'd2', messages: [], tools: [], context: [] }, expect: 409 });
  await http('GET', '/v1/ws', '/v1/ws', { auth: false });
  out.checked = checked;
  out.failures = failures;
});
