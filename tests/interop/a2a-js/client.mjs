// The npm `@a2a-js/sdk` client against the gateway's A2A face (tests/a2a.rs).
//
// Resolves the agent's card at URL with the bearer token (the gateway wants
// it on every route), then streams each turn as one message in one context;
// "reply:<text>" answers the task of the previous turn. Prints one JSON
// line: {"card": {...}, "turns": [[{case, state?, text?, taskId, contextId}...]]}
// or {"error": "..."}.
//
// Usage: node client.mjs URL TOKEN '["ask", "reply:blue"]'
import { randomUUID } from "node:crypto";
import { Role, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";

const [url, token, turnsJson] = process.argv.slice(2);
const authed = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

/** One StreamResponse, reduced to what the test compares. */
function summary(response) {
  const { $case, value } = response.payload ?? {};
  const out = { case: $case };
  const status = $case === "task" ? value.status : $case === "statusUpdate" ? value.status : undefined;
  if (status) {
    out.state = TaskState[status.state];
    const parts = status.message?.parts ?? [];
    const text = parts.filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");
    if (text) out.text = text;
  }
  if ($case === "artifactUpdate") {
    out.text = value.artifact.parts.map((p) => p.content?.value ?? "").join("");
  }
  out.taskId = $case === "task" ? value.id : value?.taskId;
  out.contextId = value?.contextId;
  return out;
}

try {
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: authed })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl: authed }),
    }),
  );
  // The resolver joins its path to the base as a URL: without a trailing
  // slash the agent's own segment would be dropped.
  const base = url.endsWith("/") ? url : `${url}/`;
  const card = await new DefaultAgentCardResolver({ fetchImpl: authed }).resolve(base);
  const client = await factory.createFromAgentCard(card);
  let contextId = "";
  let taskId = "";
  const turns = [];
  for (const turn of JSON.parse(turnsJson)) {
    const reply = turn.startsWith("reply:");
    const text = reply ? turn.slice("reply:".length) : turn;
    const message = {
      messageId: randomUUID(),
      contextId,
      taskId: reply ? taskId : "",
      role: Role.ROLE_USER,
      parts: [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "" }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    };
    const seen = [];
    for await (const response of client.sendMessageStream({ tenant: "", message, configuration: undefined, metadata: undefined })) {
      const s = summary(response);
      seen.push(s);
      contextId ||= s.contextId;
      if (s.case === "task") taskId = s.taskId;
    }
    turns.push(seen);
  }
  console.log(JSON.stringify({ card: { name: card.name, interfaces: card.supportedInterfaces }, turns }));
} catch (e) {
  console.log(JSON.stringify({ error: `${e?.name}: ${e?.message}` }));
}
