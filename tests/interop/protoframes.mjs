// Reads one gateway event stream at the byte level and prints what it held
// as one JSON line: {contentType, events}. With Accept `proto` the body must
// be AG-UI protobuf — 4-byte big-endian length, then one Event message, as
// @ag-ui/encoder writes it — and every frame is decoded with the official
// @ag-ui/proto `decode`; with `sse` the `data:` lines are parsed as JSON.
// Stops after <ends> RUN_FINISHED/RUN_ERROR events (the join stream stays
// open for live events) or at the end of the body.
//
// usage: node protoframes.mjs <url> <token-or-""> <proto|sse> <ends> [<POST body JSON>]
import { AGUI_MEDIA_TYPE, decode } from "@ag-ui/proto";

const [url, token, format, endsArg, body] = process.argv.slice(2);
const ends = Number(endsArg);
const accept = format === "proto" ? AGUI_MEDIA_TYPE : "text/event-stream";
const controller = new AbortController();
const res = await fetch(url, {
  method: body ? "POST" : "GET",
  headers: {
    Accept: accept,
    ...(body ? { "Content-Type": "application/json" } : {}),
    ...(token ? { Authorization: `Bearer ${token}` } : {}),
  },
  body: body || undefined,
  signal: controller.signal,
});
const contentType = res.headers.get("content-type");
const events = [];
let error = null;
let ended = 0;
let buf = new Uint8Array(0);
let text = "";
const push = (event) => {
  events.push(event);
  if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") ended += 1;
};
try {
  const reader = res.body.getReader();
  while (ended < ends) {
    const { done, value } = await reader.read();
    if (done) break;
    if (format === "proto") {
      const joined = new Uint8Array(buf.length + value.length);
      joined.set(buf);
      joined.set(value, buf.length);
      buf = joined;
      while (buf.length >= 4 && ended < ends) {
        const len = new DataView(buf.buffer, buf.byteOffset, 4).getUint32(0, false);
        if (buf.length < 4 + len) break;
        push(decode(buf.subarray(4, 4 + len)));
        buf = buf.slice(4 + len);
      }
    } else {
      text += new TextDecoder().decode(value, { stream: true });
      let at;
      while ((at = text.indexOf("\n\n")) >= 0 && ended < ends) {
        const frame = text.slice(0, at);
        text = text.slice(at + 2);
        const data = frame
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, ""))
          .join("\n");
        if (data) push(JSON.parse(data));
      }
    }
  }
  if (format === "proto" && buf.length > 0 && ended < ends) error = `trailing ${buf.length} bytes`;
} catch (e) {
  error = String(e && e.message ? e.message : e);
}
controller.abort();
process.stdout.write(JSON.stringify({ status: res.status, contentType, events, error }) + "\n");
process.exit(0);
