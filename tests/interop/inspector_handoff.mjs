// A handoff in the inspector: a run of the "triage" agent whose transfer to
// "billing" needs a person's approval. The page shows the approval
// interrupt; the person approves it with the page's own buttons; billing's
// answer follows, each assistant message naming its agent, the handoff
// marked in the conversation and on the timeline. Then the same thread is
// opened from its snapshot in a second browser. Prints one JSON object;
// tests/inspector.rs asserts on it.
//
// usage: node inspector_handoff.mjs <base url> <token> <thread>
import { chromium } from "playwright-core";

const [base, token, thread] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 20_000;
const out = {};

async function signedIn() {
  const page = await (await browser.newContext()).newPage();
  page.on("pageerror", (e) => (out.errors ||= []).push(String(e)));
  await page.goto(`${base}/inspector/`);
  await page.fill("#signin-token", token);
  await page.click("#signin-button");
  await page.waitForFunction(() => document.querySelector("#conn-status").textContent === "live", null, { timeout: WAIT });
  return page;
}

/** Who the page says spoke each message, the handoff markers, the
 *  timeline's marked rows. */
const view = (page) => page.evaluate(() => ({
  messages: [...document.querySelectorAll("#conversation > .msg")].map((m) => ({
    role: m.dataset.role,
    agent: m.dataset.agent ?? null,
    label: m.querySelector(".role").textContent,
    text: m.querySelector(".body").textContent,
  })),
  handoffs: [...document.querySelectorAll("#conversation .marker.handoff")].map((h) => ({
    from: h.dataset.from, to: h.dataset.to, result: h.dataset.result, text: h.textContent,
  })),
  timeline: [...document.querySelectorAll(".tl-row.handoff")].map((r) => r.textContent),
  speaking: document.querySelector("#active-agent")?.textContent ?? null,
}));

let live;
try {
  live = await signedIn();
  await live.selectOption("#agent-select", "triage");
  await live.fill("#run-thread", thread);
  await live.fill("#run-message", "a bill question");
  await live.click("#run-start");
  const form = await live.waitForSelector("#interrupts .interrupt", { timeout: WAIT });
  out.interrupt = await form.evaluate((f) => ({
    text: f.textContent,
    buttons: [...f.querySelectorAll("button")].map((b) => b.textContent),
    fields: f.querySelectorAll("label").length,
  }));
  await live.click("#interrupts .interrupt button.approve");
  await live.waitForFunction(() => [...document.querySelectorAll("#conversation > .msg")].some((m) => m.dataset.agent === "billing" && m.textContent.includes("invoice is paid")), null, { timeout: WAIT });
  // The run tree names every message once the run has ended.
  await live.waitForFunction(() => [...document.querySelectorAll(".run-item")].some((r) => r.textContent.includes("billing · finished")), null, { timeout: WAIT });
  out.live = await view(live);

  const later = await signedIn();
  await later.click("#threads-refresh");
  await later.click(`.thread-item[data-thread="${thread}"]`, { timeout: WAIT });
  await later.waitForSelector('.tl-row[data-type="snapshot"]', { timeout: WAIT });
  await later.waitForSelector('#conversation > .msg[data-agent="billing"]', { timeout: WAIT });
  out.snapshot = await view(later);
  // A reply after the handoff goes to the agent speaking (billing), though
  // the picker still says triage: the picker is for new threads.
  const runsBefore = await live.$$eval(".run-item", (r) => r.length);
  await live.fill("#reply-message", "and my next bill?");
  await live.click("#reply-send");
  await live.waitForFunction((n) => document.querySelectorAll(".run-item").length > n
    && document.querySelector(".run-item.head")?.textContent.includes("finished"), runsBefore, { timeout: WAIT });
  out.replyRun = await live.$eval(".run-item.head small", (s) => s.textContent);
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
  out.failedAt = await live?.$eval("#thread", (t) => t.innerText).catch(() => null);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
