// A page on another origin fetches an AG-UI run from the gateway the way an
// app traced with OpenTelemetry's browser instrumentation does: with
// `traceparent`, `tracestate` and `baggage` headers (so the browser sends a
// CORS preflight first). The page is any loopback URL of another origin
// (the gateway's own /healthz under `localhost` while the run goes to
// `127.0.0.1`: another origin, and the same loopback address space, so
// Chromium's local-network checks do not interfere). Prints one JSON line:
// the response status and body, or the browser's error.
//
// usage: node cors_fetch.mjs <page url> <run url> <token> <traceparent>
import { chromium } from "playwright-core";

const [pageUrl, runUrl, token, traceparent] = process.argv.slice(2);
const out = {};
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await (await browser.newContext()).newPage();
  await page.goto(pageUrl);
  Object.assign(
    out,
    await page.evaluate(
      async ({ runUrl, token, traceparent }) => {
        try {
          const response = await fetch(runUrl, {
            method: "POST",
            headers: {
              Authorization: `Bearer ${token}`,
              "Content-Type": "application/json",
              Accept: "text/event-stream",
              traceparent,
              tracestate: "app=1",
              baggage: "session.id=abc",
            },
            body: JSON.stringify({
              threadId: "cors-page",
              runId: "r1",
              messages: [{ id: "u1", role: "user", content: "hi" }],
              tools: [],
              context: [],
              state: {},
              forwardedProps: {},
            }),
          });
          return { origin: location.origin, status: response.status, body: await response.text() };
        } catch (e) {
          return { origin: location.origin, error: String(e) };
        }
      },
      { runUrl, token, traceparent },
    ),
  );
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
