// Activity, subagents and custom events in the inspector: a run of the
// scripted "activity" agent watched live, then the same thread opened from
// its snapshot in a second browser. Prints one JSON object with what each
// page shows; tests/inspector.rs asserts on it.
//
// usage: node inspector_activity.mjs <base url> <token>
import { chromium } from "playwright-core";

const [base, token] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const WAIT = 15_000;
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

/** What the conversation shows, grouped as a person reads it. */
const view = (page) => page.evaluate(() => {
  const text = (node) => (node ? node.textContent : null);
  const conversation = document.querySelector("#conversation");
  return {
    activities: [...conversation.querySelectorAll(".activity")].map((a) => ({
      id: a.dataset.activity,
      subagent: a.closest(".subagent")?.dataset.subagent ?? null,
      text: a.textContent,
    })),
    subagents: [...conversation.querySelectorAll(".subagent")].map((s) => ({
      id: s.dataset.subagent,
      name: text(s.querySelector(":scope > summary .name")),
      status: text(s.querySelector(":scope > summary .status")),
      outcome: text(s.querySelector(":scope > .outcome")),
      messages: [...s.querySelectorAll(".msg .body")].map((m) => m.textContent),
    })),
    customs: [...conversation.querySelectorAll(".custom")].map((c) => ({
      name: c.dataset.custom,
      count: text(c.querySelector(".count")),
      latest: text(c.querySelector(".latest")),
    })),
    reasoning: [...conversation.querySelectorAll("details.reasoning")].map((r) => r.textContent),
    topLevelMessages: [...conversation.querySelectorAll(":scope > .msg .body")].map((m) => m.textContent),
    // Nothing is a raw event dump any more.
    rawLines: [...conversation.querySelectorAll("div")].filter((d) => /ACTIVITY_|SUBAGENT_/.test(d.textContent)).length,
    notices: [...document.querySelectorAll("#notices .notice")].map((n) => n.textContent),
  };
});

let live;
try {
  live = await signedIn();
  await live.selectOption("#agent-select", "activity");
  await live.fill("#run-thread", "act-1");
  await live.fill("#run-message", "research journals");
  await live.click("#run-start");
  await live.waitForFunction(() => document.querySelectorAll('.tl-row[data-type="RUN_FINISHED"]').length >= 1, null, { timeout: WAIT });
  out.live = await view(live);
  out.liveRows = await live.$$eval(".tl-row", (rows) => rows.map((r) => [Number(r.dataset.seq), r.dataset.type]));

  const later = await signedIn();
  await later.click("#threads-refresh");
  await later.click('.thread-item[data-thread="act-1"]', { timeout: WAIT });
  await later.waitForSelector('.tl-row[data-type="snapshot"]', { timeout: WAIT });
  out.snapshot = await view(later);
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
  // What the page showed when it gave up.
  out.failedAt = await live?.$eval("#thread", (t) => t.innerText).catch(() => null);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
