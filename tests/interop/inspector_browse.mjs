// Browses the inspector as one person signed in with a minted development
// token, under a fake page clock, and reports what the page did:
//   - the thread list's first page, the "more" page, and the list filtered
//     by agent and by status: the query each list request carried, the
//     threads the gateway answered with, and the items the page then shows;
//   - the timeline filtered to one event type;
//   - after jumping the page clock to half a minute before the token's
//     expiry: whether it minted a new token and sent it as `auth` on the
//     socket it already had (no second WebSocket), and the gateway's answer.
// Every wait is for a request, a response, a frame or the page's DOM.
//
// usage: node inspector_browse.mjs <base url> <user> <thread to open> <agent filter> <status filter>
import { chromium } from "playwright-core";

const [base, user, thread, agentFilter, statusFilter] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const out = { sockets: 0, mints: 0 };
const shown = (page) => page.$$eval(".thread-item", (l) => l.map((i) => i.dataset.thread));
const isThreads = (r) => new URL(r.url()).pathname === "/v1/threads";

/** Does `action`, waits for the thread list request it causes and for the
 *  page to show `keep` plus what the gateway answered. */
async function listAfter(page, action, keep = []) {
  const [response] = await Promise.all([page.waitForResponse(isThreads), action()]);
  const answered = (await response.json()).threads.map((t) => t.threadId);
  await page.waitForFunction(
    (ids) => JSON.stringify([...document.querySelectorAll(".thread-item")].map((i) => i.dataset.thread)) === JSON.stringify(ids),
    [...keep, ...answered],
    { timeout: 30_000 },
  );
  return { query: new URL(response.url()).search, answered, shown: await shown(page) };
}

try {
  const page = await (await browser.newContext()).newPage();
  // Fakes the page's timers and Date only: the gateway keeps real time.
  await page.clock.install();
  page.on("request", (r) => {
    if (new URL(r.url()).pathname.endsWith("/dev-token")) out.mints += 1;
  });
  let refreshed;
  const refreshAnswered = new Promise((resolve) => (refreshed = resolve));
  page.on("websocket", (ws) => {
    out.sockets += 1;
    const refreshIds = new Set();
    ws.on("framesent", (f) => {
      const frame = JSON.parse(f.payload);
      // The first frame authenticates (id "auth"); a later `auth` refreshes.
      if (frame.type === "auth" && frame.id !== "auth") {
        refreshIds.add(frame.id);
        out.refreshToken = frame.token;
      }
    });
    ws.on("framereceived", (f) => {
      const frame = JSON.parse(f.payload);
      if (refreshIds.has(frame.id)) refreshed(frame);
    });
  });
  await page.goto(`${base}/inspector/`);
  await page.waitForSelector("#dev-mint:not([hidden])");
  await page.fill("#dev-sub", user);
  const first = await listAfter(page, () => page.click("#dev-mint-button"));
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, {
    timeout: 30_000,
  });
  out.firstToken = await page.evaluate(() => sessionStorage.getItem("agui-inspector.token"));
  out.firstPage = first;
  out.moreShown = await page.isVisible("#threads-more");
  out.nextPage = await listAfter(page, () => page.click("#threads-more"), first.shown);
  out.moreShownAfter = await page.isVisible("#threads-more");

  // Each filter change reloads the list from its first page.
  out.byAgent = await listAfter(page, () => page.selectOption("#filter-agent", agentFilter));
  await listAfter(page, () => page.selectOption("#filter-agent", ""));
  out.byStatus = await listAfter(page, () => page.selectOption("#filter-status", statusFilter));
  await listAfter(page, () => page.selectOption("#filter-status", ""));

  // The timeline filtered to one event type, over a run started from the
  // page on that thread (opened first, so its events arrive live).
  await page.click(`.thread-item[data-thread="${thread}"]`, { timeout: 30_000 });
  await page.waitForSelector('.tl-row[data-type="snapshot"]', { state: "attached", timeout: 30_000 });
  await page.selectOption("#agent-select", "demo");
  await page.fill("#run-thread", thread);
  await page.fill("#run-message", "once more");
  await page.click("#run-start");
  await page.waitForSelector('.tl-row[data-type="RUN_FINISHED"]', { state: "attached", timeout: 30_000 });
  await page.selectOption("#timeline-filter", "TEXT_MESSAGE_CONTENT");
  out.timelineShown = await page.$$eval(".tl-row:not([hidden])", (r) => r.map((x) => x.dataset.type));
  out.timelineAll = await page.$$eval(".tl-row", (r) => r.map((x) => x.dataset.type));

  // Half a minute before the token expires (its refresh is due a minute
  // before), the page mints a new one and sends it on the open connection.
  const mintsBefore = out.mints;
  await page.clock.fastForward("59:30");
  out.refreshAnswer = await refreshAnswered;
  out.mintsForRefresh = out.mints - mintsBefore;
  await page.waitForFunction((t) => sessionStorage.getItem("agui-inspector.token") === t, out.refreshToken, {
    timeout: 30_000,
  });
  out.status = await page.textContent("#conn-status");
  out.errors = await page.$$eval("#notices .error", (n) => n.map((x) => x.textContent));
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
