// Drives the gateway's AI SDK chat face with the AI SDK's own client: a
// headless `AbstractChat` (the class `useChat` wraps) over the stock
// `DefaultChatTransport`, which parses the UI message stream with the SDK's
// own parser and builds the UIMessages with its own reducer. Prints one JSON
// line: the chat's messages, status, error, and the data parts it saw.
//
// usage: node aisdk_chat.mjs <chat api url> <token> <chatId> <scenario> <text>
// scenario:
//   send      — sendMessage(text) and wait until the chat is ready
//   approve   — send; answer the first tool approval request (approved when
//               <text> contains "transfer"), let the chat send the answer
//               automatically and wait for the continued response
//   deny      — same, denied
//   answer    — send; answer the first `data-interrupt` part (an interrupt
//               not on a tool call, e.g. LangGraph's `interrupt()`) with
//               `{approved: true}` in the request body's `resume`, the way
//               docs/ai-sdk.md tells a client to, and wait for the answer
//   reconnect — a fresh chat with this id calls resumeStream()
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

const [api, token, chatId, scenario, text] = process.argv.slice(2);

class State {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(m) {
    this.messages = this.messages.concat(m);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(i, m) {
    this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)];
  }
  snapshot(x) {
    return structuredClone(x);
  }
}

class HeadlessChat extends AbstractChat {
  constructor(init) {
    const state = new State();
    super({ ...init, state });
    this.s = state;
  }
}

const data = [];
const errors = [];
const chat = new HeadlessChat({
  id: chatId,
  transport: new DefaultChatTransport({
    api,
    headers: { Authorization: `Bearer ${token}` },
  }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onData: (part) => data.push(part),
  onError: (e) => errors.push(String(e && e.message ? e.message : e)),
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function settled(pred = () => true) {
  for (let i = 0; i < 400; i++) {
    if ((chat.status === "ready" || chat.status === "error") && pred()) return;
    await sleep(25);
  }
  throw new Error(`chat never settled (status ${chat.status})`);
}

const toolParts = () =>
  chat.messages.flatMap((m) => m.parts).filter((p) => p.type.startsWith("tool-"));

if (scenario === "reconnect") {
  await chat.resumeStream();
  await settled();
} else {
  await chat.sendMessage({ text });
  await settled();
  if (scenario === "approve" || scenario === "deny") {
    const asking = toolParts().find((p) => p.state === "approval-requested");
    if (!asking) throw new Error("no approval request: " + JSON.stringify(chat.messages));
    await chat.addToolApprovalResponse({
      id: asking.approval.id,
      approved: scenario === "approve",
    });
    await settled(() =>
      toolParts().some(
        (p) => p.toolCallId === asking.toolCallId && p.state.startsWith("output-"),
      ),
    );
  }
  if (scenario === "answer") {
    const asking = data.find((p) => p.type === "data-interrupt");
    if (!asking) throw new Error("no data-interrupt part: " + JSON.stringify(data));
    await chat.sendMessage(undefined, {
      body: {
        resume: [{ interruptId: asking.id, status: "resolved", payload: { approved: true } }],
      },
    });
    await settled();
  }
}

process.stdout.write(
  JSON.stringify({
    messages: chat.messages,
    status: chat.status,
    error: chat.error ? String(chat.error.message ?? chat.error) : null,
    errors,
    data,
  }) + "\n",
);
