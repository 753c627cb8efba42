// Reads a thread's SSE join stream (GET /v1/threads/{id}/events) with the
// stock @ag-ui/client HttpAgent pipeline (SSE parsing, schema, verifyEvents,
// the default reducer) — only the request is a GET instead of a POST — and
// prints one JSON line: events, folded messages and state, pending
// interrupts, any error. The join stream stays open for live events, so the
// script stops (abortRun) once it has seen <runs> RUN_FINISHED/RUN_ERROR events.
//
// usage: node joinstream.mjs <url> <token-or-""> <runs>
import { HttpAgent } from "@ag-ui/client";

const [url, token, runs] = process.argv.slice(2);
const want = Number(runs);

class JoinStream extends HttpAgent {
  requestInit() {
    return {
      method: "GET",
      headers: {
        ...this.headers,
        // AGUI_ACCEPT=proto: the AG-UI protobuf encoding instead of SSE.
        Accept:
          process.env.AGUI_ACCEPT === "proto"
            ? "application/vnd.ag-ui.event+proto"
            : "text/event-stream",
      },
      signal: this.abortController.signal,
    };
  }
}

const agent = new JoinStream({
  url,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
});
const events = [];
let error = null;
let ended = 0;
try {
  await agent.runAgent(
    {},
    {
      onEvent({ event }) {
        events.push(event);
        if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") {
          ended += 1;
          if (ended >= want) agent.abortRun();
        }
      },
    },
  );
} catch (e) {
  if (!(ended >= want && (e?.name === "AbortError" || /abort/i.test(String(e?.message))))) {
    error = String(e && e.message ? e.message : e);
  }
}
process.stdout.write(
  JSON.stringify({
    events,
    messages: agent.messages,
    state: agent.state,
    pendingInterrupts: agent.pendingInterrupts ?? null,
    error,
  }) + "\n",
);
process.exit(0);
