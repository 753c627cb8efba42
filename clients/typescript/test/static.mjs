// The package's own checks, no gateway needed (`npm test`, after `tsc`):
// - the protocol's shapes in src/index.js (PROTOCOL) are the ones
//   docs/protocol.md lists, and the ones docs/ws-protocol.schema.json
//   describes — so none of the three can drift;
// - docs/ws-protocol.schema.json is valid JSON Schema 2020-12;
// - docs/openapi.json is a valid OpenAPI 3.1 document (a real validator).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import { Validator } from '@seriousme/openapi-schema-validator';
import { PROTOCOL, RUN_KINDS, GatewayError } from '../src/index.js';

const docs = new URL('../../../docs/', import.meta.url);
const read = (name) => readFileSync(new URL(name, docs), 'utf8');
const results = [];
const check = async (name, fn) => {
  await fn();
  results.push(name);
};

/** `| \`type\` | fields … |` rows of the markdown table under `heading`. */
function table(markdown, heading) {
  const start = markdown.indexOf(heading);
  assert.ok(start >= 0, `docs/protocol.md has "${heading}"`);
  const rows = {};
  const lines = markdown.slice(start + heading.length).split('\n');
  let seen = false;
  for (const line of lines) {
    if (!line.startsWith('|')) {
      if (seen) break;
      continue;
    }
    seen = true;
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    const type = /^`([a-z]+)`$/.exec(cells[0])?.[1];
    if (!type) continue;
    // Field names are the backticked words of the second cell (`name?`,
    // `name: Type` → name); shapes like `{runId, …}` or `Interrupt[]` are not names.
    const fields = [...cells[1].matchAll(/`([^`]+)`/g)]
      .map((m) => m[1].split(':')[0].trim())
      .filter((f) => /^[a-zA-Z]+\??$/.test(f));
    rows[type] = fields;
  }
  return rows;
}

const names = (fields) => fields.map((f) => f.replace(/\?$/, '')).sort();

await check('commands: docs/protocol.md = PROTOCOL.commands', () => {
  const md = read('protocol.md');
  assert.deepEqual(table(md, 'Client → gateway:'), PROTOCOL.commands);
});

await check('replies: docs/protocol.md = PROTOCOL.replies', () => {
  const md = read('protocol.md');
  const replies = table(md, 'Gateway → client:');
  assert.deepEqual(Object.keys(replies).sort(), Object.keys(PROTOCOL.replies).sort());
  for (const [type, fields] of Object.entries(replies)) assert.deepEqual(names(fields), names(PROTOCOL.replies[type]), type);
});

await check('error and close codes: docs/protocol.md = PROTOCOL', () => {
  const md = read('protocol.md');
  const errors = md.slice(md.indexOf('Error codes:'), md.indexOf('Close codes:'));
  assert.deepEqual([...errors.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]), PROTOCOL.errorCodes);
  const from = md.indexOf('Close codes:');
  const closes = md.slice(from, md.indexOf('\n\n', from));
  assert.deepEqual([...closes.matchAll(/\b([14]0\d\d)\b/g)].map((m) => m[1]).sort(), Object.keys(PROTOCOL.closeCodes).sort());
});

await check('docs/ws-protocol.schema.json = PROTOCOL (commands, replies, codes)', () => {
  const schema = JSON.parse(read('ws-protocol.schema.json'));
  const defs = schema.$defs;
  const own = (def) => Object.keys(def.properties).filter((k) => k !== 'type');
  for (const [type, fields] of Object.entries(PROTOCOL.commands)) {
    const def = defs[`command.${type}`];
    assert.ok(def, `command ${type} described`);
    assert.deepEqual(own(def).filter((k) => k !== 'id').sort(), names(fields), `command ${type}: fields`);
    assert.deepEqual(def.required.filter((k) => k !== 'type').sort(), fields.filter((f) => !f.endsWith('?')).sort(), `command ${type}: required`);
  }
  assert.deepEqual(Object.keys(defs).filter((k) => k.startsWith('command.')).length, Object.keys(PROTOCOL.commands).length);
  for (const [type, fields] of Object.entries(PROTOCOL.replies)) {
    const def = defs[`reply.${type}`];
    assert.ok(def, `reply ${type} described`);
    const all = [...fields, ...(PROTOCOL.replyExtensions[type] || [])];
    assert.deepEqual(own(def).sort(), names(all), `reply ${type}: fields`);
  }
  assert.deepEqual(defs.errorCode.enum, PROTOCOL.errorCodes);
  assert.deepEqual(defs.closeCode.oneOf.map((c) => String(c.const)).sort(), Object.keys(PROTOCOL.closeCodes).sort());
  assert.deepEqual(defs.runInfo.properties.kind.enum, RUN_KINDS);
});

await check('branches: run kinds and routes = docs/protocol.md and docs/openapi.json', () => {
  const md = read('protocol.md');
  const from = md.indexOf('## Branches');
  assert.ok(from >= 0, 'docs/protocol.md has "Branches"');
  const kinds = md.slice(from, md.indexOf('The journaled', from));
  assert.deepEqual([...kinds.matchAll(/`([a-z]+)`/g)].map((m) => m[1]).filter((k) => k !== 'parentRunId'), RUN_KINDS);
  const api = JSON.parse(read('openapi.json'));
  const runs = api.paths['/v1/threads/{threadId}/runs']?.get;
  assert.ok(runs, 'openapi: GET /v1/threads/{threadId}/runs');
  const params = (op) => (op.parameters || []).map((p) => p.$ref ? api.components.parameters[p.$ref.split('/').pop()].name : p.name);
  assert.ok(params(runs).includes('cursor') && params(runs).includes('limit'), 'runs is paginated');
  assert.ok(params(api.paths['/v1/threads/{threadId}'].get).includes('runId'), 'the snapshot takes ?runId=');
  assert.ok(params(api.paths['/v1/threads/{threadId}/messages'].get).includes('runId'), 'the exports take ?runId=');
});

await check('docs/ws-protocol.schema.json is valid JSON Schema 2020-12 and compiles under ajv strict mode', () => {
  const ajv = new Ajv2020({ strict: true });
  const validate = ajv.compile(JSON.parse(read('ws-protocol.schema.json')));
  assert.ok(validate({ type: 'subscribe', threadId: 't', after: 3 }));
  // AG-UI payloads are typed (AG-UI's own models), unknown event types pass (lossless).
  const event = (e) => validate({ type: 'event', threadId: 't', seq: 1, event: e });
  assert.ok(event({ type: 'TEXT_MESSAGE_CONTENT', messageId: 'm', delta: 'hi' }));
  assert.ok(!event({ type: 'TEXT_MESSAGE_CONTENT', messageId: 'm' }), 'a known event missing a field is refused');
  assert.ok(event({ type: 'A_NEWER_EVENT', anything: 1 }), 'an event type newer than the description passes');
  assert.ok(validate({ type: 'run', threadId: 't', messages: [{ id: 'u', role: 'user', content: 'hi' }], tools: [{ name: 'f', description: 'd', parameters: {} }], context: [{ description: 'c', value: 'v' }] }));
  assert.ok(!validate({ type: 'run', threadId: 't', messages: [{ id: 'u', role: 'robot', content: 'hi' }] }), 'an unknown role is refused');
  assert.ok(!validate({ type: 'run', threadId: 't', tools: [{ description: 'no name' }] }), 'a tool without a name is refused');
  assert.ok(!validate({ type: 'subscribe' }), 'a subscribe without threadId is refused');
  assert.ok(validate({ type: 'error', id: 'c1', code: 'conflict', message: 'busy' }));
  assert.ok(!validate({ type: 'error', code: 'teapot', message: '' }), 'unknown error codes are refused');
});

await check('docs/openapi.json is a valid OpenAPI 3.1 document', async () => {
  const validator = new Validator();
  const result = await validator.validate(JSON.parse(read('openapi.json')));
  assert.equal(validator.version, '3.1');
  assert.ok(result.valid, JSON.stringify(result.errors, null, 2));
});

await check('docs/openapi.json: tags and an example on every operation; every JSON example matches its schema', () => {
  const api = JSON.parse(read('openapi.json'));
  const ajv = new Ajv2020({ strict: false });
  ajv.addSchema(api, 'openapi');
  const esc = (k) => k.replace(/~/g, '~0').replace(/\//g, '~1');
  const tags = new Set(api.tags.map((t) => t.name));
  let examples = 0;
  for (const [path, ops] of Object.entries(api.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const name = `${method.toUpperCase()} ${path}`;
      assert.ok(op.tags?.length && op.tags.every((t) => tags.has(t)), `${name}: tagged with a declared tag`);
      assert.ok(JSON.stringify(op).includes('"example'), `${name}: has an example`);
      const media = [['requestBody', op.requestBody], ...Object.entries(op.responses).map(([code, r]) => [`responses/${code}`, r])];
      for (const [where, part] of media) {
        const json = part?.content?.['application/json'];
        if (!json || json.example === undefined) continue;
        const validate = ajv.getSchema(`openapi#/paths/${esc(path)}/${method}/${where}/content/application~1json/schema`);
        assert.ok(validate(json.example), `${name} ${where} example: ${ajv.errorsText(validate.errors)}`);
        examples += 1;
      }
    }
  }
  assert.ok(examples >= 20, `JSON examples checked: ${examples}`);
});

await check('GatewayError carries the contract code', () => {
  const e = GatewayError.from({ code: 'rate_limited', message: 'slow down', retryAfter: 3 });
  assert.ok(e instanceof Error);
  assert.equal(e.code, 'rate_limited');
  assert.equal(e.retryAfter, 3);
});

for (const name of results) console.log(`ok - ${name}`);
