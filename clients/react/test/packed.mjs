// The package as a newcomer gets it: `npm pack` of this package and of
// @agui-gateway/client, installed into a fresh project with the NEWEST
// React, peers and TypeScript, then an example component type-checked with
// `tsc --strict` WITHOUT skipLibCheck. Run by .ci/run (needs the registry).
// usage: node test/packed.mjs
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const here = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'agui-react-packed-'));
const run = (cmd, args, cwd = dir) => execFileSync(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });

run('npm', ['pack', '--pack-destination', dir, '--loglevel=error'], here);
run('npm', ['pack', '--pack-destination', dir, '--loglevel=error'], join(here, '../typescript'));
const tarballs = readdirSync(dir).filter((f) => f.endsWith('.tgz')).map((f) => `./${f}`);
writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'fresh', private: true, type: 'module' }));
run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs,
  'react@latest', 'react-dom@latest', '@types/react@latest', '@ag-ui/client@latest', '@ag-ui/core@latest', 'rxjs@latest', 'typescript@latest']);
writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
  compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', jsx: 'react-jsx', strict: true, noEmit: true, lib: ['ES2022', 'DOM'], types: [] },
  files: ['example.tsx'],
}));
writeFileSync(join(dir, 'example.tsx'), `
import { useGatewayConnection, useThread } from '@agui-gateway/react';
import { useGatewayAgent } from '@agui-gateway/react/agent';

export function Thread({ threadId }: { threadId: string }) {
  const connection = useGatewayConnection({ url: 'https://gateway.example', token: async () => 'jwt' });
  const { status, messages, isRunning, run, alternatives } = useThread(connection, threadId);
  const last = messages.at(-1);
  return (
    <div data-status={status}>
      {messages.map((m) => <p key={m.id}>{m.role}</p>)}
      {last && alternatives(last.id).map(({ run: r, onHead }) => <i key={r.runId}>{onHead ? '*' : ''}</i>)}
      <button disabled={isRunning} onClick={() => void run({ agent: 'a', messages: [{ id: 'u', role: 'user', content: 'hi' }] })} />
    </div>
  );
}

export function Copilot({ threadId }: { threadId: string }) {
  const connection = useGatewayConnection({ url: 'https://gateway.example', token: 'jwt' });
  const { messages, runAgent } = useGatewayAgent({ connection, agent: 'a', threadId });
  return <button onClick={() => void runAgent()}>{messages.length}</button>;
}
`);
run(join(dir, 'node_modules/.bin/tsc'), ['-p', '.']);
const versions = JSON.parse(run('npm', ['ls', '--json', 'react', 'typescript']));
console.log(JSON.stringify({ ok: true, dir, react: versions.dependencies.react.version, typescript: versions.dependencies.typescript.version }));
