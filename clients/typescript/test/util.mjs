// Shared by the integration scripts (driven by the Rust test tests/clients.rs
// against a real gateway): Node 20 has no global WebSocket, so the `ws`
// package is injected, as the README says.
import WebSocket from 'ws';
import { createHmac } from 'node:crypto';
import { GatewayConnection } from '../src/index.js';

/** An HS256 token signed with `secret` (the test gateway's). */
export function mint(secret, claims) {
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub: 'alice', roles: ['user'], exp: now + 3600, ...claims })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}

/** A connection to the gateway at `base` (http://host:port). */
export function connect(base, token, options = {}) {
  return new GatewayConnection({ url: base, token, WebSocket, ...options });
}

/** Collects a session's seqs (snapshot seq marked) and events. */
export function record(session) {
  const seen = { seqs: [], types: [], snapshots: [] };
  session.on('snapshot', (s) => { seen.snapshots.push(s.seq); seen.seqs.push(`snapshot@${s.seq}`); });
  session.on('event', ({ seq, event }) => { seen.seqs.push(seq); seen.types.push(event.type); });
  return seen;
}

/** Prints the script's one JSON result (a thrown error becomes `failure`). */
export async function main(body) {
  const out = {};
  try {
    await body(out);
  } catch (e) {
    out.failure = String(e && e.stack ? e.stack : e);
    if (e && e.code) out.failureCode = e.code;
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

export const userMessage = (id, content) => ({ id, role: 'user', content });
