// Reconnects without missing or repeating an event.
// usage:
//   node reconnect.mjs restart <base> <token> <thread>
//     watches <thread>; prints "watching", then "reconnected" after the test
//     restarts the gateway; prints the JSON once it saw the next run end.
//   node reconnect.mjs cut|stall <base> <token> <agent> <release url>
//     through a TCP proxy of its own: starts a gated run, cuts every socket
//     mid-run (the gateway keeps running), releases the run while cut off,
//     lets the client back in, and prints the JSON once the run ended;
//     `stall` leaves the sockets open but silent instead (found by ping).
import net from 'node:net';
import { connect, main, record, userMessage } from './util.mjs';

const [mode, base, token, ...rest] = process.argv.slice(2);

if (mode === 'restart') {
  const [thread] = rest;
  main(async (out) => {
    const conn = connect(base, token, { reconnect: { initialDelayMs: 100, maxDelayMs: 500 } });
    const states = [];
    conn.on('state', (s) => states.push(s));
    await conn.connect();
    const session = conn.session(thread);
    const seen = record(session);
    await session.subscribe();
    // The cursor it holds: a seq, and the epoch of its history (if named).
    const epochs = [session.epoch];
    const resets = [];
    session.on('reset', ({ previousSeq, snapshot }) => resets.push({ previousSeq, seq: snapshot.seq }));
    console.log('watching');
    await new Promise((resolve) => { const stop = conn.on('state', (s) => { if (s === 'reconnecting') { stop(); resolve(); } }); });
    await new Promise((resolve) => { const stop = conn.on('open', () => { stop(); resolve(); }); });
    await session.whenReady();
    console.log('reconnected');
    await new Promise((resolve) => session.on('event', ({ event }) => { if (event.type === 'RUN_FINISHED') resolve(); }));
    epochs.push(session.epoch);
    Object.assign(out, seen, { states, epochs, resets });
    conn.close();
  });
} else if (mode === 'cut' || mode === 'stall') {
  const [agent, release] = rest;
  main(async (out) => {
    // A proxy to the gateway: `cut` resets every socket; while `held`, new
    // connections wait (the client is offline until we let it in).
    const target = new URL(base);
    const sockets = new Set();
    let held = null;
    let accepted = 0;
    const proxy = net.createServer((client) => {
      accepted += 1;
      const open = () => {
        const upstream = net.connect(Number(target.port), target.hostname);
        sockets.add(client);
        sockets.add(upstream);
        client.pipe(upstream);
        upstream.pipe(client);
        const drop = () => { sockets.delete(client); sockets.delete(upstream); client.destroy(); upstream.destroy(); };
        client.on('close', drop);
        upstream.on('close', drop);
        client.on('error', drop);
        upstream.on('error', drop);
      };
      if (held) held.push(open);
      else open();
    });
    await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const via = `http://127.0.0.1:${proxy.address().port}`;
    // `stall`: the sockets stay open but carry nothing; only the client's
    // ping (short here) finds out.
    const liveness = mode === 'stall' ? { pingIntervalMs: 200, pingTimeoutMs: 400 } : {};
    const conn = connect(via, token, { reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, ...liveness });
    const closes = [];
    conn.on('close', (c) => closes.push([c.code, c.reason]));
    await conn.connect();
    const thread = `cut-${Date.now()}`;
    const session = conn.session(thread);
    const seen = record(session);
    const firstDelta = new Promise((resolve) => session.on('event', ({ event }) => { if (event.type === 'TEXT_MESSAGE_CONTENT') resolve(); }));
    const ended = session.runEnded('gated-run');
    // Watching a thread that does not exist yet (not_found arrives after the
    // run is sent): the run's thread is still resubscribed after the cut.
    const watching = session.subscribe().then(() => 'subscribed', (e) => e.code);
    await session.run({ agent, runId: 'gated-run', messages: [userMessage('g-m1', 'go')] });
    out.subscribeBeforeThread = await watching;
    await firstDelta;
    out.seqBeforeCut = session.seq;
    held = [];
    const down = new Promise((resolve) => { const stop = conn.on('state', (s) => { if (s === 'reconnecting') { stop(); resolve(); } }); });
    const stalled = [...sockets];
    if (mode === 'cut') for (const s of stalled) s.resetAndDestroy();
    else for (const s of stalled) { s.unpipe(); s.pause(); }
    await down;
    // The run goes on in the gateway while the client is cut off.
    out.released = (await fetch(release, { method: 'POST' })).status;
    const waiting = held;
    held = null;
    for (const open of waiting) open();
    await ended;
    out.accepted = accepted;
    out.closes = [...closes];
    Object.assign(out, seen);
    out.snapshot = await session.fetchSnapshot().then((s) => ({ seq: s.seq, status: s.run?.status, text: s.messages.map((m) => m.content).join('|') }));
    conn.close();
    for (const s of stalled) s.destroy();
    proxy.close();
  });
}
