// The package as a newcomer gets it: `npm pack`, installed into a fresh
// project with the NEWEST peers and TypeScript (`npm i <tarball>
// @ag-ui/client @ag-ui/core rxjs typescript`: rxjs newer than the one
// @ag-ui/client pins, so two copies), then an example type-checked with
// `tsc --strict` WITHOUT skipLibCheck, and run: both entry points import
// and a GatewayAgent is built. Run by .ci/run (needs the npm registry).
// usage: node test/packed.mjs
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const here = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'agui-client-packed-'));
const run = (cmd, args, cwd = dir) => execFileSync(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });

run('npm', ['pack', '--pack-destination', dir, '--loglevel=error'], here);
const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'fresh', private: true, type: 'module' }));
run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', `./${tarball}`, '@ag-ui/client@latest', '@ag-ui/core@latest', 'rxjs@latest', 'typescript@latest', 'ws@latest']);
writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
  compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, lib: ['ES2022', 'DOM'], types: [] },
  files: ['example.ts'],
}));
writeFileSync(join(dir, 'example.ts'), `
import { EventType } from '@ag-ui/core';
import { GatewayConnection, GatewayError, type RunAck } from '@agui-gateway/client';
import { GatewayAgent } from '@agui-gateway/client/agent';

export async function example(signal: AbortSignal): Promise<string> {
  const connection = new GatewayConnection({ url: 'http://127.0.0.1:8080', token: async () => 'jwt', retry: { attempts: 2 } });
  const thread = connection.session('t1');
  await connection.connect({ signal });
  await thread.subscribe({ signal });
  const ack: RunAck = await thread.run({ agent: 'demo', messages: [{ id: 'u1', role: 'user', content: 'hi' }] }, { signal });
  let text = '';
  for await (const { event } of thread.events({ signal })) {
    if (event.type === EventType.TEXT_MESSAGE_CONTENT) text += event.delta;
    if (event.type === EventType.RUN_FINISHED && event.runId === ack.runId) break;
  }
  try { await thread.cancel(); } catch (e) { if (e instanceof GatewayError && e.code === 'conflict') return text; }
  const agent = new GatewayAgent({ connection, agent: 'demo', threadId: 't1' });
  await agent.runAgent({ runId: 'r2' });
  return text + agent.messages.length;
}
`);
const versions = JSON.parse(run('npm', ['ls', '--all', '--json', 'rxjs', 'typescript', '@ag-ui/client']));
run(join(dir, 'node_modules/.bin/tsc'), ['-p', '.']);
const smoke = run('node', ['--input-type=module', '-e', `
import WebSocket from 'ws';
import * as core from '@agui-gateway/client';
import { GatewayAgent } from '@agui-gateway/client/agent';
const agent = new GatewayAgent({ url: 'http://127.0.0.1:9', token: 't', WebSocket, agent: 'a', threadId: 't' });
console.log(JSON.stringify({ exports: Object.keys(core).sort(), agent: agent.threadId }));
`]);
console.log(JSON.stringify({ ok: true, dir, typescript: versions.dependencies.typescript.version, rxjs: versions.dependencies.rxjs.version, smoke: JSON.parse(smoke) }));
