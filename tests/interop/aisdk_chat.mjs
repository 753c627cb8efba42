// Drives the gateway's AI SDK chat face with the AI SDK's own client: a
// headless `AbstractChat` (the class `useChat` wraps) over the stock
// `DefaultChatTransport`, which parses the UI message stream with the SDK's
// own parser and builds the UIMessages with its own reducer. Prints one JSON
// line: the chat's messages, status, error, and the data parts it saw.
//
// usage: node aisdk_chat.mjs <chat api url> <token> <chatId> <scenario> <text>
// environment:
//   AI_PACKAGE     — which `ai` to load: `ai5`, `ai6` (npm aliases of ai@5
//                    and ai@6 in package.json) or `ai` (7, the default)
//   AI_SDK_VERSION — sent as the `x-ai-sdk-version` header when set (how a
//                    client of `ai` 6+ asks for tool approval requests)
//   ANSWER_TOKEN   — approve/deny: the answer is sent with this token (another
//                    person answering the approval the first one asked for)
// scenario:
//   send      — sendMessage(text) and wait until the chat is ready
//   approve   — send; answer the first interrupt on a tool call: with
//               `addToolApprovalResponse` when the chat shows an approval
//               request (`ai` 6+), else — the `ai` 5 way — with
//               `addToolOutput({approved: true})` on the tool call the
//               `data-interrupt` part names; let the chat send the answer
//               automatically and wait for the continued response
//   deny      — same, denied
//   answer    — send; answer the first `data-interrupt` part (an interrupt
//               not on a tool call, e.g. LangGraph's `interrupt()`) with
//               `{approved: true}` in the request body's `resume`, the way
//               docs/ai-sdk.md tells a client to, and wait for the answer
//   reconnect — a fresh chat with this id calls resumeStream()
//   regenerate — send <text>, then regenerate() the answer; `steps` holds
//               the messages after each
//   branch    — send <text>, send "two", regenerate() the last answer, then
//               edit the second question (sendMessage with its messageId);
//               `steps` holds the messages after each of the four
const pkg = process.env.AI_PACKAGE || "ai";
const {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} = await import(pkg);

const [api, token, chatId, scenario, text] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}` };
if (process.env.AI_SDK_VERSION) headers["x-ai-sdk-version"] = process.env.AI_SDK_VERSION;

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
  transport: new DefaultChatTransport({ api, headers }),
  // What an app of each version sets: tool outputs the client added (all
  // versions), approval responses (6+).
  sendAutomaticallyWhen: (o) =>
    lastAssistantMessageIsCompleteWithToolCalls(o) ||
    (lastAssistantMessageIsCompleteWithApprovalResponses?.(o) ?? false),
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

const steps = [];
if (scenario === "reconnect") {
  await chat.resumeStream();
  await settled();
} else if (scenario === "regenerate") {
  await chat.sendMessage({ text });
  await settled();
  steps.push(structuredClone(chat.messages));
  await chat.regenerate();
  await settled();
  steps.push(structuredClone(chat.messages));
} else if (scenario === "branch") {
  await chat.sendMessage({ text });
  await settled();
  steps.push(structuredClone(chat.messages));
  await chat.sendMessage({ text: "two" });
  await settled();
  steps.push(structuredClone(chat.messages));
  await chat.regenerate();
  await settled();
  steps.push(structuredClone(chat.messages));
  const second = chat.messages.filter((m) => m.role === "user")[1];
  await chat.sendMessage({ text: "two, edited", messageId: second.id });
  await settled();
  steps.push(structuredClone(chat.messages));
} else {
  await chat.sendMessage({ text });
  await settled();
  if (scenario === "approve" || scenario === "deny") {
    const approved = scenario === "approve";
    // The transport reads `headers` at each request.
    if (process.env.ANSWER_TOKEN) headers.Authorization = `Bearer ${process.env.ANSWER_TOKEN}`;
    let asking = toolParts().find((p) => p.state === "approval-requested");
    if (asking) {
      await chat.addToolApprovalResponse({ id: asking.approval.id, approved });
    } else {
      const interrupt = data.find((p) => p.type === "data-interrupt" && p.data.toolCallId);
      if (!interrupt) throw new Error("no interrupt on a tool call: " + JSON.stringify(chat.messages));
      asking = toolParts().find((p) => p.toolCallId === interrupt.data.toolCallId);
      if (!asking || asking.state !== "input-available")
        throw new Error("no tool call waiting: " + JSON.stringify(chat.messages));
      await chat.addToolOutput({
        tool: asking.type.slice("tool-".length),
        toolCallId: asking.toolCallId,
        output: { approved },
      });
    }
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
    steps,
  }) + "\n",
);
