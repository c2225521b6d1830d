// The web UI in a real browser: Debian's chromium, headless, driven by
// playwright-core. Run by crates/airlock-cli/tests/web_ui.rs, which passes:
//
//   AIRLOCK_BIN         the airlock binary
//   AIRLOCK_PLAYWRIGHT  the playwright-core package directory
//   AIRLOCK_CHROMIUM    the browser (default /usr/bin/chromium)
//   AIRLOCK_SHOTS       where screenshots go (test artefacts)
//
// It starts `airlock serve --http 127.0.0.1:0` in a new workspace with no
// tokens configured, as a newcomer would, opens the login URL it prints,
// and decides what agents propose over HTTP: approve, deny, edit, with the
// list kept live by server-sent events, then reads the audit view.

import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, existsSync, rmSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { startAirlock } from "./airlock.mjs";

const { chromium } = await import(join(process.env.AIRLOCK_PLAYWRIGHT, "index.mjs"));
const shots = process.env.AIRLOCK_SHOTS;
mkdirSync(shots, { recursive: true });

const workspace = mkdtempSync(join(tmpdir(), "airlock-web-"));
// airlock's clock, which the test moves (outside the workspace).
process.env.AIRLOCK_TEST_CLOCK = join(mkdtempSync(join(tmpdir(), "airlock-web-clock-")), "offset");
writeFileSync(join(workspace, "a.txt"), "old line\nkept\n");
writeFileSync(join(workspace, "b.txt"), "b stays\n");
writeFileSync(join(workspace, "c.txt"), "c old\n");
writeFileSync(join(workspace, "spoof.sql"), "-- header\nselect 1;\n");
mkdirSync(join(workspace, "src"));
writeFileSync(join(workspace, "src", "one.rs"), "fn one() {}\n");
writeFileSync(join(workspace, "src", "two.rs"), "fn two() {}\n");

// ------------------------------------------------------------------ server

const { server, login, base } = await startAirlock(workspace);

// An agent on this machine (no tokens configured: local agents need none).
async function propose(tool, args, session = "agent-session-1") {
  const response = await fetch(base + "/v1/tools/call", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ tool, arguments: args, session }),
  });
  const body = await response.json();
  assert.equal(response.status, 202, JSON.stringify(body));
  return body.approval_id;
}

// An agent over MCP (streamable HTTP at /mcp), with a client that can be
// asked (elicitation) but leaves the question to the human at the browser.
async function mcpPost(body, session) {
  const headers = {
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
  };
  if (session) {
    headers["Mcp-Session-Id"] = session;
    headers["MCP-Protocol-Version"] = "2025-11-25";
  }
  return fetch(base + "/mcp", { method: "POST", headers, body: JSON.stringify(body) });
}

// The JSON-RPC message answering `id` in a response (JSON or an SSE stream).
async function answerTo(response, id) {
  if ((response.headers.get("content-type") || "").startsWith("application/json")) {
    return response.json();
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended before the answer to ${id}`);
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (!data) continue;
      const message = JSON.parse(data);
      if (message.id === id && ("result" in message || "error" in message)) {
        reader.cancel().catch(() => {});
        return message;
      }
    }
  }
}

async function mcpSession() {
  const init = await mcpPost({
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: {
      protocolVersion: "2025-11-25",
      capabilities: { elicitation: {} },
      clientInfo: { name: "browser-test-agent", version: "1.0.0" },
    },
  });
  assert.equal(init.status, 200);
  const session = init.headers.get("mcp-session-id");
  assert.ok(session, "no Mcp-Session-Id");
  const initialized = await answerTo(init, 1);
  assert.ok(initialized.result, JSON.stringify(initialized));
  const notified = await mcpPost({ jsonrpc: "2.0", method: "notifications/initialized" }, session);
  assert.equal(notified.status, 202);
  return session;
}

// A decision is shown as soon as it is stored; its file changes a moment
// later, when the apply is done.
async function eventually(path, expected) {
  const deadline = Date.now() + 10000;
  while (read(path) !== expected && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  assert.equal(read(path), expected, `${path} never became ${JSON.stringify(expected)}`);
}

const read = (path) => (existsSync(join(workspace, path)) ? readFileSync(join(workspace, path), "utf8") : null);

// ------------------------------------------------------------------ browser

const browser = await chromium.launch({
  executablePath: process.env.AIRLOCK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const steps = [];
function step(name) {
  steps.push(name);
  console.log("step:", name);
}

// Waits until `card` shows an outcome matching `pattern` (it may say
// "applying…" first), then dismisses it: the card leaves only then.
async function settled(card, pattern) {
  const text = card.locator(".outcome-text");
  const deadline = Date.now() + 10000;
  let shown = "";
  while (Date.now() < deadline) {
    shown = (await text.isVisible()) ? await text.textContent() : "";
    if (pattern.test(shown)) break;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  assert.match(shown, pattern);
  assert.equal(await card.locator("button.approve").isVisible(), false, "a decided card offers no decision");
  await card.locator("button.dismiss").click();
  await card.waitFor({ state: "detached", timeout: 10000 });
}

// Moves the clock of airlock's processes (AIRLOCK_TEST_CLOCK) forward.
function advanceClock(ms) {
  const file = process.env.AIRLOCK_TEST_CLOCK;
  const now = existsSync(file) ? Number(readFileSync(file, "utf8").trim()) || 0 : 0;
  writeFileSync(file + ".tmp", String(now + ms));
  renameSync(file + ".tmp", file);
}

try {
  // A phone-sized screen.
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
  const page = await context.newPage();
  const pageErrors = [];
  page.on("pageerror", (error) => pageErrors.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error") pageErrors.push(message.text());
  });

  step("log in with the token URL");
  await page.goto(login);
  await page.locator("#live.on").waitFor({ timeout: 10000 });
  assert.ok(!page.url().includes("token="), "the token stays in the address bar: " + page.url());
  await page.locator("#pending-empty").waitFor({ state: "visible" });
  await page.screenshot({ path: join(shots, "01-logged-in.png") });

  step("a proposed write appears live, with its diff");
  const first = await propose("write_file", { path: "a.txt", content: "new line\nkept\n" });
  const card = page.locator(`li.card[data-id="${first}"]`);
  await card.waitFor({ timeout: 10000 });
  assert.equal(await card.locator(".tool").textContent(), "write_file");
  assert.equal(await card.locator(".risk").textContent(), "medium");
  assert.equal(await card.locator(".session").textContent(), "agent-session-1");
  assert.match(await card.locator(".requester").textContent(), /local/);
  assert.match(await card.locator(".countdown").textContent(), /^\d+(h \d+m|m \d\ds|s)$/);
  assert.deepEqual(await card.locator(".diff .add").allTextContents(), ["+new line"]);
  assert.deepEqual(await card.locator(".diff .del").allTextContents(), ["-old line"]);
  // Green and red.
  const addColour = await card.locator(".diff .add").evaluate((el) => getComputedStyle(el).backgroundColor);
  const delColour = await card.locator(".diff .del").evaluate((el) => getComputedStyle(el).backgroundColor);
  assert.equal(addColour, "rgb(230, 247, 234)");
  assert.equal(delColour, "rgb(253, 234, 234)");
  // The reason says it is optional; the always-allows that apply are
  // offered, each stated in full before it can be chosen.
  assert.equal(await card.locator(".reason-need").textContent(), "(optional)");
  assert.deepEqual(await card.locator(".scope option").allTextContents(), ["this session", "every session"]);
  assert.match(
    await card.locator(".always-says").textContent(),
    /^Approves, and from now on will allow write_file on a\.txt with any content, for (user \S+|calls made for no user), in session agent-session-1 only, for 8h, without asking\.$/,
  );
  await card.locator(".scope").selectOption("persistent");
  assert.match(await card.locator(".always-says").textContent(), /, in every session, for 8h, without asking\.$/);
  await card.locator(".scope").selectOption("session");
  // Nothing is wider than the phone.
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow}px wider than the screen`);
  await page.screenshot({ path: join(shots, "02-pending-write-phone.png"), fullPage: true });

  step("approve it: the card says it was applied, and the file changes");
  await card.locator("button.approve").click();
  await settled(card, /^Approved by \S+ via http and applied\.$/);
  await eventually("a.txt", "new line\nkept\n");
  await page.locator("#pending-empty").waitFor({ state: "visible" });

  step("a write proposed over MCP is approved in the browser; the MCP call returns");
  const session = await mcpSession();
  const mcpCall = mcpPost(
    { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "write_file", arguments: { path: "mcp.txt", content: "from mcp\n" } } },
    session,
  ).then((response) => answerTo(response, 2));
  const viaMcp = page.locator("li.card", { hasText: "mcp.txt" });
  await viaMcp.waitFor({ timeout: 10000 });
  assert.deepEqual(await viaMcp.locator(".diff .add").allTextContents(), ["+from mcp"]);
  await viaMcp.locator("button.approve").click();
  await settled(viaMcp, /^Approved by \S+ via http and applied\.$/);
  const answered = await mcpCall;
  assert.equal(answered.result.structuredContent.status, "allowed", JSON.stringify(answered));
  assert.equal(answered.result.structuredContent.decision.channel, "http");
  assert.equal(read("mcp.txt"), "from mcp\n");

  step("a call made in no session offers only an always-allow for every session");
  const unsessioned = await fetch(base + "/v1/tools/call", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ tool: "write_file", arguments: { path: "nosession.txt", content: "x\n" } }),
  });
  assert.equal(unsessioned.status, 202);
  const noSession = page.locator(`li.card[data-id="${(await unsessioned.json()).approval_id}"]`);
  await noSession.waitFor({ timeout: 10000 });
  assert.deepEqual(await noSession.locator(".scope option").allTextContents(), ["every session"]);
  assert.match(await noSession.locator(".always-says").textContent(), /, in every session, for 8h, without asking\.$/);
  await noSession.locator("button.deny").click();
  await settled(noSession, /^Denied by \S+ via http\.$/);

  step("deny another, with a reason");
  const second = await propose("write_file", { path: "b.txt", content: "b replaced\n" });
  const denied = page.locator(`li.card[data-id="${second}"]`);
  await denied.waitFor({ timeout: 10000 });
  await denied.locator("input.reason").fill("not this one");
  await denied.locator("button.deny").click();
  await settled(denied, /^Denied by \S+ via http \(reason: not this one\)\.$/);
  assert.equal(read("b.txt"), "b stays\n");

  step("two from one session: each offers 'approve all', and a batch decides both");
  const one = await propose("write_file", { path: "batch-1.txt", content: "1\n" });
  const two = await propose("write_file", { path: "batch-2.txt", content: "2\n" });
  const cardOne = page.locator(`li.card[data-id="${one}"]`);
  const cardTwo = page.locator(`li.card[data-id="${two}"]`);
  await cardTwo.waitFor({ timeout: 10000 });
  assert.equal(await cardOne.locator("button.session-all").textContent(), "Approve all 2 from this session");
  await cardOne.locator("input.select").check();
  await cardTwo.locator("input.select").check();
  assert.equal(await page.locator("#batch-count").textContent(), "2 selected");
  await page.locator("#batch-approve").click();
  await settled(cardOne, /^Approved by \S+ via http and applied\.$/);
  await settled(cardTwo, /^Approved by \S+ via http and applied\.$/);
  assert.equal(read("batch-1.txt"), "1\n");
  assert.equal(read("batch-2.txt"), "2\n");
  assert.equal(await page.locator("#batch-bar").isVisible(), false);

  step("the session filter shows one session's approvals");
  const mine = await propose("write_file", { path: "filter-1.txt", content: "1\n" });
  const theirs = await propose("write_file", { path: "filter-2.txt", content: "2\n" }, "agent-session-2");
  const cardMine = page.locator(`li.card[data-id="${mine}"]`);
  const cardTheirs = page.locator(`li.card[data-id="${theirs}"]`);
  await cardTheirs.waitFor({ timeout: 10000 });
  const filter = page.locator("#pending-session");
  const sessions = await filter.locator("option").allTextContents();
  assert.ok(sessions.includes("agent-session-1") && sessions.includes("agent-session-2"), sessions.join());
  assert.equal(sessions[0], "All sessions");
  await filter.selectOption("agent-session-2");
  assert.equal(await cardMine.isVisible(), false);
  assert.equal(await cardTheirs.isVisible(), true);
  await filter.selectOption("");
  assert.equal(await cardMine.isVisible(), true);
  await cardMine.locator("button.deny").click();
  await settled(cardMine, /^Denied by \S+ via http/);
  await cardTheirs.locator("button.deny").click();
  await settled(cardTheirs, /^Denied by \S+ via http/);
  assert.equal(read("filter-2.txt"), null);

  step("edit before approving");
  const third = await propose("write_file", { path: "c.txt", content: "c proposed\n" });
  const edited = page.locator(`li.card[data-id="${third}"]`);
  await edited.waitFor({ timeout: 10000 });
  await edited.locator("button.edit").click();
  const text = edited.locator("textarea.edit-text");
  await text.waitFor();
  assert.equal(await text.inputValue(), "c proposed\n");
  await text.fill("c edited by a human\n");
  // The diff of the edited version, live, as approving would apply it.
  await edited.locator(".edit-diff .add", { hasText: "+c edited by a human" }).waitFor({ timeout: 10000 });
  assert.deepEqual(await edited.locator(".edit-diff .del").allTextContents(), ["-c old"]);
  await page.screenshot({ path: join(shots, "03-edit-before-approve.png"), fullPage: true });
  await edited.locator("button.approve").click();
  await settled(edited, /^Approved by \S+ via http and applied\.$/);
  await eventually("c.txt", "c edited by a human\n");

  step("a multi-file patch shows each file, collapsible");
  const patch = [
    "*** Begin Patch",
    "*** Update File: src/one.rs",
    "@@",
    "-fn one() {}",
    "+fn one() -> u8 { 1 }",
    "*** Update File: src/two.rs",
    "@@",
    "-fn two() {}",
    "+fn two() -> u8 { 2 }",
    "*** End Patch",
    "",
  ].join("\n");
  const fourth = await propose("apply_patch", { patch });
  const patched = page.locator(`li.card[data-id="${fourth}"]`);
  await patched.waitFor({ timeout: 10000 });
  const files = patched.locator(".diff details");
  assert.equal(await files.count(), 2);
  assert.match(await files.nth(0).locator("summary").textContent(), /src\/one\.rs/);
  assert.match(await files.nth(1).locator("summary").textContent(), /src\/two\.rs/);
  assert.equal(await patched.locator("button.edit").isHidden(), true, "a two-file patch offers no edit");
  await files.nth(1).locator("summary").click();
  assert.equal(await files.nth(1).evaluate((el) => el.open), false, "a file collapses");

  step("what an agent proposes is shown as text, never run as markup");
  const hostile = await propose("write_file", {
    path: "evil.html",
    content: '<img src=x onerror="document.body.dataset.pwned=1"><script>document.body.dataset.pwned=1</script>\n' +
      "\u202Egnp.exe\u001b[2K\u0085\n",
  });
  const evil = page.locator(`li.card[data-id="${hostile}"]`);
  await evil.waitFor({ timeout: 10000 });
  assert.equal(await evil.locator("img, script").count(), 0);
  assert.match(await evil.locator(".diff .add").first().textContent(), /<img src=x onerror=/);
  // A bidi override and control characters are shown, not obeyed.
  assert.equal(await evil.locator(".diff .add").nth(1).textContent(), "+<U+202E>gnp.exe\\x1b[2K\\u{85}");
  assert.equal(await page.evaluate(() => document.body.dataset.pwned ?? null), null);
  await page.screenshot({ path: join(shots, "04-patch-and-hostile-content.png"), fullPage: true });

  step("lines of a file that look like diff headers stay in their file");
  const spoof = await propose("write_file", { path: "spoof.sql", content: "++ b/harmless.txt\nselect 1;\n" });
  const spoofed = page.locator(`li.card[data-id="${spoof}"]`);
  await spoofed.waitFor({ timeout: 10000 });
  assert.equal(await spoofed.locator(".diff details").count(), 1);
  assert.match(await spoofed.locator(".diff summary").textContent(), /^spoof\.sql {2}\+1 −1$/);
  assert.deepEqual(await spoofed.locator(".diff .del").allTextContents(), ["--- header"]);
  assert.deepEqual(await spoofed.locator(".diff .add").allTextContents(), ["+++ b/harmless.txt"]);
  await spoofed.locator("button.deny").click();
  await settled(spoofed, /^Denied by /);

  step("a decision made elsewhere shows on the card live: by whom, how");
  const cli = spawn(process.env.AIRLOCK_BIN, ["deny", hostile, "--reason", "from the terminal"], {
    cwd: workspace,
    env: { ...process.env, AIRLOCK_USER: "terminal-user" },
    stdio: "ignore",
  });
  await new Promise((resolve) => cli.on("exit", resolve));
  await settled(evil, /^Denied by terminal-user via terminal \(reason: from the terminal\)\.$/);
  await patched.locator("button.deny").click();
  await settled(patched, /^Denied by /);

  step("approving a change whose file changed since says stale on the card");
  const staleId = await propose("write_file", { path: "c.txt", content: "c from the agent\n" });
  const stale = page.locator(`li.card[data-id="${staleId}"]`);
  await stale.waitFor({ timeout: 10000 });
  writeFileSync(join(workspace, "c.txt"), "c changed meanwhile\n");
  await stale.locator("button.approve").click();
  await stale.locator(".outcome-text", { hasText: "stale" }).waitFor({ timeout: 10000 });
  await page.screenshot({ path: join(shots, "07-stale-outcome-phone.png"), fullPage: true });
  await settled(stale, /^Approved by \S+ via http, but not applied: stale: the file changed after this was proposed/);
  assert.equal(read("c.txt"), "c changed meanwhile\n");

  step("deciding what was already decided elsewhere says by whom");
  // Live updates cut, so the page still shows it as pending when clicked.
  // (A route never answered: the stream neither opens nor fails.)
  await page.route("**/hitl/events", () => {});
  await page.reload();
  const lateId = await propose("write_file", { path: "late.txt", content: "late\n" });
  await page.reload();
  const late = page.locator(`li.card[data-id="${lateId}"]`);
  await late.waitFor({ timeout: 10000 });
  const other = spawn(process.env.AIRLOCK_BIN, ["approve", lateId], {
    cwd: workspace,
    env: { ...process.env, AIRLOCK_USER: "terminal-user" },
    stdio: "ignore",
  });
  await new Promise((resolve) => other.on("exit", resolve));
  await late.locator("button.deny").click();
  await settled(late, /^Already decided: Approved by terminal-user via terminal and applied\.$/);
  assert.equal(read("late.txt"), "late\n");
  await page.unroute("**/hitl/events");
  await page.reload();
  await page.locator("#live.on").waitFor({ timeout: 10000 });

  step("an approval that runs out says expired on its card");
  const deferred = spawn(process.env.AIRLOCK_BIN, ["call", "write_file", "--args", JSON.stringify({ path: "never.txt", content: "x\n" }), "--defer"], {
    cwd: workspace,
    env: process.env,
    stdio: "ignore",
  });
  await new Promise((resolve) => deferred.on("exit", resolve));
  const expiring = page.locator("li.card", { hasText: "never.txt" });
  await expiring.waitFor({ timeout: 10000 });
  advanceClock(121000);
  await settled(expiring, /^Expired: no decision in 120 s, so denied\.$/);
  assert.equal(read("never.txt"), null);

  step("a 4,000-line diff on a phone: collapsed, with the buttons in reach");
  const long = Array.from({ length: 4000 }, (_, n) => `line ${n} of a long file`).join("\n") + "\n";
  const longId = await propose("write_file", { path: "long.txt", content: long });
  const longCard = page.locator(`li.card[data-id="${longId}"]`);
  await longCard.waitFor({ timeout: 10000 });
  assert.ok((await longCard.locator(".diff .line").count()) < 100, "a large file is shown in full");
  const showAll = longCard.locator("button.show-all");
  assert.match(await showAll.textContent(), /^Show all \d+ lines \(\d+ added and 0 removed lines below\)$/);
  const inView = async () => {
    const box = await longCard.locator("button.approve").boundingBox();
    return box !== null && box.y >= 0 && box.y + box.height <= 844;
  };
  await showAll.scrollIntoViewIfNeeded();
  assert.ok(await inView(), "the approve button is out of reach beside the collapsed diff");
  await page.screenshot({ path: join(shots, "08-large-diff-phone.png") });
  await showAll.click();
  assert.ok((await longCard.locator(".diff .line").count()) > 4000);
  await longCard.locator(".diff .line").nth(2000).scrollIntoViewIfNeeded();
  assert.ok(await inView(), "the approve button scrolled away in the middle of a long diff");
  await page.screenshot({ path: join(shots, "09-large-diff-expanded-phone.png") });
  await longCard.locator("button.approve").click();
  await settled(longCard, /^Approved by \S+ via http and applied\.$/);
  assert.equal(read("long.txt"), long);

  step("the audit view lists the events and the chain's status");
  await page.locator("#tab-audit").click();
  await page.locator("#chain.ok").waitFor({ timeout: 10000 });
  assert.match(await page.locator("#chain").textContent(), /Chain verified: \d+ records/);
  const events = await page.locator("#audit-table tbody tr td:nth-child(3)").allTextContents();
  for (const event of ["write_file_propose", "hitl_decision", "write_file_apply"]) {
    assert.ok(events.includes(event), `no ${event} in ${events}`);
  }
  await page.screenshot({ path: join(shots, "05-audit-phone.png"), fullPage: true });

  step("the audit view filters");
  await page.locator("#audit-event").fill("hitl_decision");
  await page.locator("#audit-filter").fill("decision=deny");
  await page.locator("#audit-form button").click();
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll("#audit-table tbody tr")];
    return rows.length > 0 && rows.every((row) => row.dataset.event === "hitl_decision");
  });
  const decisions = await page.locator("#audit-table tbody tr td:nth-child(6)").allTextContents();
  // Five denials above, and the session filter's two.
  assert.deepEqual(decisions, ["deny", "deny", "deny", "deny", "deny", "deny", "deny"]);

  step("the stats view charts decisions over time, time to decision by risk and top tools asked");
  const token = decodeURIComponent(new URL(login).hash.replace(/^#token=/, ""));
  const expected = await (await fetch(base + "/v1/stats?since=7d", {
    headers: { Authorization: "Bearer " + token },
  })).json();
  assert.ok(expected.total.approved > 0 && expected.total.denied > 0, JSON.stringify(expected.total));
  await page.locator("#tab-stats").click();
  const figure = (name) => page.locator(`#stats-totals dd[data-figure="${name}"]`);
  await figure("approved").waitFor({ timeout: 10000 });
  for (const [name, value] of [["approved", expected.total.approved], ["denied", expected.total.denied],
    ["asked", expected.total.asks], ["calls", expected.total.calls]]) {
    assert.equal(await figure(name).textContent(), String(value), name);
  }
  await page.locator("#chart-timeline rect.bar.approved").first().waitFor({ timeout: 10000 });
  assert.ok((await page.locator("#chart-timeline rect.bar.denied").count()) > 0, "no denied bar");
  assert.ok((await page.locator("#chart-risk rect.bar.p50").count()) > 0, "no time-to-decision bar");
  const toolNames = await page.locator("#chart-tools text").allTextContents();
  assert.ok(toolNames.includes("write_file"), `no write_file in ${toolNames}`);
  await page.screenshot({ path: join(shots, "12-stats-phone.png"), fullPage: true });

  step("a wide screen");
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.locator("#tab-pending").click();
  await propose("write_file", { path: "d.txt", content: "d\n" });
  await page.locator("li.card").first().waitFor({ timeout: 10000 });
  await page.screenshot({ path: join(shots, "06-desktop.png"), fullPage: true });
  await page.locator("#tab-stats").click();
  await page.locator("#chart-timeline rect.bar").first().waitFor({ timeout: 10000 });
  await page.screenshot({ path: join(shots, "13-stats-desktop.png"), fullPage: true });
  await page.locator("#tab-pending").click();

  step("a bad token is refused");
  const stranger = await context.newPage();
  await stranger.goto(base + "/#token=not-a-token");
  await stranger.locator("#login-view").waitFor({ state: "visible", timeout: 10000 });
  assert.match(await stranger.locator("#login-error").textContent(), /not accepted/);

  // The browser logs the one refused decision (409: it was already decided
  // elsewhere), which the page handled; nothing else.
  assert.deepEqual(
    pageErrors,
    ["Failed to load resource: the server responded with a status of 409 (Conflict)"],
    "the page reported errors",
  );
  console.log(`ok: ${steps.length} steps; screenshots in ${shots}`);
} finally {
  await browser.close();
  // SIGTERM stops the server cleanly (it signs a last checkpoint): wait for
  // it to exit before removing its state.
  const exited = server.exitCode !== null || server.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => server.on("exit", resolve));
  server.kill();
  await exited;
  rmSync(workspace, { recursive: true, force: true });
}
