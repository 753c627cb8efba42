// @ag-ui/a2a's A2AAgent (on @a2a-js/sdk 0.2) run against an A2A agent
// directly, for tests/a2a.rs to compare with the same agent behind the
// gateway. Prints one JSON line: {"events": [<AG-UI events>]} or {"error"}.
//
// Usage: node direct.mjs BASE_URL TEXT
import { A2AAgent } from "@ag-ui/a2a";
import { A2AClient } from "@a2a-js/sdk/client";

const [base, text] = process.argv.slice(2);
const events = [];
try {
  const agent = new A2AAgent({
    a2aClient: new A2AClient(base),
    initialMessages: [{ id: "u1", role: "user", content: text }],
  });
  await agent.runAgent({ runId: "r1" }, { onEvent: ({ event }) => events.push(event) });
  console.log(JSON.stringify({ events }));
} catch (e) {
  console.log(JSON.stringify({ error: `${e?.name}: ${e?.message}`, events }));
}
