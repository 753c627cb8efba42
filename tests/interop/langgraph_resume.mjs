// A LangGraph/CopilotKit-style frontend on the stock @ag-ui/client
// HttpAgent: one run that the graph pauses with `interrupt()`, then — in
// the same client, the LangGraph way — a user message plus
// `forwardedProps.command.resume` (no `resume` entries). Prints one JSON
// line: for each run, the event types the client delivered, its pending
// interrupts after the run, and any error; then the client's messages.
//
// usage: node langgraph_resume.mjs <url> <token-or-""> <threadId>
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
  threadId,
  initialMessages: [{ id: "u1", role: "user", content: "email bob" }],
});

async function run(params) {
  const events = [];
  let error = null;
  try {
    await agent.runAgent(params, {
      onEvent({ event }) {
        events.push(event.name ? `${event.type}:${event.name}` : event.type);
      },
    });
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  return { events, pendingInterrupts: agent.pendingInterrupts ?? null, error };
}

const first = await run({ runId: `${threadId}-1` });
agent.addMessage({ id: "u2", role: "user", content: "yes, send it" });
const second = await run({
  runId: `${threadId}-2`,
  forwardedProps: { command: { resume: { approved: true } } },
});
process.stdout.write(JSON.stringify({ first, second, messages: agent.messages }) + "\n");
