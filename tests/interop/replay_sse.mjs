// Feeds join-stream bodies the gateway sent (raw SSE text, captured by the
// test) to the stock @ag-ui/client HttpAgent pipeline — its SSE parser,
// schema, verifyEvents and default reducer — through the agent's `fetch`
// option, and prints what the client made of them. Each case is one agent
// (one client) that reads its bodies in turn, as one `runAgent` each: a
// client that read a stream up to a cursor, then started again there.
//
// usage: node replay_sse.mjs <cases.json>
//   cases.json: [{"name": "...", "bodies": ["<sse text>", ...]}, ...]
// Prints one JSON line: {"<name>": {"error", "messages", "state"}, ...}.
import { HttpAgent } from "@ag-ui/client";
import { readFileSync } from "node:fs";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = {};
for (const c of cases) {
  const bodies = [...c.bodies];
  const agent = new HttpAgent({
    url: "http://gateway.invalid/join",
    fetch: async () =>
      new Response(bodies.shift(), { headers: { "content-type": "text/event-stream" } }),
  });
  let error = null;
  for (let i = 0; i < c.bodies.length && error === null; i++) {
    try {
      await agent.runAgent({});
    } catch (e) {
      error = `body ${i}: ${String(e && e.message ? e.message : e)}`;
    }
  }
  out[c.name] = { error, messages: agent.messages, state: agent.state };
}
// Exits once the (large) line is flushed: a pipe takes 64 KiB at a time.
process.stdout.write(JSON.stringify(out) + "\n", () => process.exit(0));
