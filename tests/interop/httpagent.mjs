// Runs one AG-UI run with the stock @ag-ui/client HttpAgent and prints what the
// client saw as one JSON line: every event it delivered, its folded messages
// and state, its pending interrupts, any error, and any warnings the client
// printed about stripping or dropping material it did not recognise.
//
// usage: node httpagent.mjs <url> <token-or-""> <threadId> <runId> <user text>
//          [<resume JSON array>]
// With a resume array the run answers the interrupts of a previous run
// (`runAgent({runId, resume})`, as a stock app would after an interrupt).
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId, runId, text, resumeJson] = process.argv.slice(2);
const warnings = [];
const warn = console.warn;
console.warn = (...args) => {
  warnings.push(args.map(String).join(" "));
};

// AGUI_ACCEPT=proto asks for the AG-UI protobuf encoding instead of SSE (the
// client picks its parser from the response's content type).
class Agent extends HttpAgent {
  requestInit(input) {
    const init = super.requestInit(input);
    if (process.env.AGUI_ACCEPT === "proto") {
      init.headers = { ...init.headers, Accept: "application/vnd.ag-ui.event+proto" };
    }
    return init;
  }
}

const agent = new Agent({
  url,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
  threadId,
  initialMessages: [{ id: "u1", role: "user", content: text }],
});
const events = [];
let error = null;
const params = { runId };
if (resumeJson) params.resume = JSON.parse(resumeJson);
try {
  await agent.runAgent(params, {
    onEvent({ event }) {
      events.push(event);
    },
  });
} catch (e) {
  error = String(e && e.message ? e.message : e);
}
console.warn = warn;
process.stdout.write(
  JSON.stringify({
    events,
    messages: agent.messages,
    state: agent.state,
    pendingInterrupts: agent.pendingInterrupts ?? null,
    error,
    warnings,
  }) + "\n",
);
