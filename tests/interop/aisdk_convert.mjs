// Converts an `ai-sdk` export of the gateway (`GET
// /v1/threads/{id}/messages?format=ai-sdk`) to model messages with the
// AI SDK's own `convertToModelMessages`, in each installed major version —
// what an app does to continue a conversation it reloaded. Prints one JSON
// line: {"ai5": ModelMessage[] | {error}, "ai6": …, "ai7": …}.
//
// usage: node aisdk_convert.mjs <export JSON>
const exported = JSON.parse(process.argv[2]);
const out = {};
for (const [name, pkg] of [["ai5", "ai5"], ["ai6", "ai6"], ["ai7", "ai"]]) {
  const { convertToModelMessages } = await import(pkg);
  try {
    out[name] = await convertToModelMessages(exported.messages);
  } catch (e) {
    out[name] = { error: String(e && e.message ? e.message : e) };
  }
}
process.stdout.write(JSON.stringify(out) + "\n");
