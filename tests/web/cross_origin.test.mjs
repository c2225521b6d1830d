// Web pages the user visits must not drive airlock. Run by
// crates/airlock-cli/tests/web_ui.rs with the same environment as
// ui.test.mjs (AIRLOCK_BIN, AIRLOCK_PLAYWRIGHT, AIRLOCK_CHROMIUM).
//
// `airlock serve --http 127.0.0.1:0` with no tokens configured, so local
// agents need none: exactly what a hostile page would like to be one of.
// In a real headless chromium:
//
//   1. a page on another origin sends what a page can send without asking
//      (no-cors fetch with text/plain, a text/plain form, a form-encoded
//      form) to /v1/tools/call and /mcp;
//   2. the same page tries a CORS fetch with a JSON body;
//   3. DNS rebinding: a page served as http://rebind.test:<airlock's port>/
//      (the attacker's server, before the name is rebound) calls its own
//      origin, which the browser now resolves to 127.0.0.1 (airlock).
//
// Nothing may be proposed or written, and the rebound page must read a
// refusal, not an answer. A real agent's call (no Origin, JSON) still works.

import { createServer } from "node:http";
import { mkdtempSync, existsSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { startAirlock } from "./airlock.mjs";

const { chromium } = await import(join(process.env.AIRLOCK_PLAYWRIGHT, "index.mjs"));

const workspace = mkdtempSync(join(tmpdir(), "airlock-xorigin-"));

const { server, login, base } = await startAirlock(workspace);
const port = new URL(login).port;
const admin = new URL(login).hash.replace("#token=", "");

const call = (path) =>
  JSON.stringify({ tool: "write_file", arguments: { path, content: "pwned\n" }, session: "s" });

// The attacker's page, on another origin (another port of this machine).
const attackPage = `<!doctype html><meta charset="utf-8"><title>cute cats</title>
<iframe name="sink" style="display:none"></iframe>
<form id="plain" method="POST" action="${base}/v1/tools/call" enctype="text/plain" target="sink">
  <input name='${call("form-plain.txt").slice(0, -2)}' value='"}'>
</form>
<form id="urlencoded" method="POST" action="${base}/v1/tools/call" target="sink">
  <input name="tool" value="write_file">
</form>
<script>
window.results = {};
async function attack() {
  const tries = {
    noCorsPlain: () => fetch("${base}/v1/tools/call", {
      method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
      body: ${JSON.stringify(call("fetch-plain.txt"))} }),
    noCorsMcp: () => fetch("${base}/mcp", {
      method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
      body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "initialize", params: {
        protocolVersion: "2025-11-25", capabilities: {}, clientInfo: {name: "cats", version: "1"}}}) }),
    corsJson: () => fetch("${base}/v1/tools/call", {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: ${JSON.stringify(call("fetch-json.txt"))} }),
  };
  for (const [name, send] of Object.entries(tries)) {
    try { const r = await send(); window.results[name] = "answered " + r.type + " " + r.status; }
    catch (e) { window.results[name] = "blocked: " + e; }
  }
  document.getElementById("plain").submit();
  await new Promise((r) => setTimeout(r, 300));
  document.getElementById("urlencoded").submit();
  await new Promise((r) => setTimeout(r, 300));
  window.results.done = true;
}
attack();
</script>`;

// What the rebinding attacker serves as http://rebind.test:<port>/ before
// the name is pointed at 127.0.0.1: a page that then calls its own origin.
const rebindPage = `<!doctype html><meta charset="utf-8"><title>rebind</title>
<script>
window.results = {};
(async () => {
  try {
    const r = await fetch("/v1/tools/call", { method: "POST", headers: {"Content-Type": "application/json"},
      body: ${JSON.stringify(call("rebound.txt"))} });
    window.results.call = r.status + " " + (await r.text());
  } catch (e) { window.results.call = "blocked: " + e; }
  try {
    const r = await fetch("/hitl/pending");
    window.results.pending = r.status + " " + (await r.text());
  } catch (e) { window.results.pending = "blocked: " + e; }
  window.results.done = true;
})();
</script>`;

const attacker = createServer((request, response) => {
  response.writeHead(200, { "Content-Type": "text/html" });
  response.end(attackPage);
});
await new Promise((resolve) => attacker.listen(0, "127.0.0.1", resolve));
const attackerUrl = `http://localhost:${attacker.address().port}/`;

const browser = await chromium.launch({
  executablePath: process.env.AIRLOCK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    // The rebinding: the attacker's name now resolves to this machine.
    "--host-resolver-rules=MAP rebind.test 127.0.0.1",
    // Chromium's own local-network checks would stop the rebound page
    // before airlock sees it; other browsers (and older ones) have none,
    // so airlock must refuse it by itself.
    "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults",
  ],
});

const steps = [];
const step = (name) => {
  steps.push(name);
  console.log("step:", name);
};

try {
  const context = await browser.newContext();

  step("a cross-origin page sends simple requests and forms");
  const page = await context.newPage();
  await page.goto(attackerUrl);
  await page.waitForFunction(() => window.results && window.results.done, null, { timeout: 20000 });
  const results = await page.evaluate(() => window.results);
  console.log("cross-origin:", JSON.stringify(results));
  // A CORS fetch is refused by the browser (airlock sends no CORS headers,
  // and the preflight or the request itself is refused).
  assert.match(results.corsJson, /^blocked/);

  step("DNS rebinding: the page at rebind.test:<airlock's port> calls its own origin");
  const rebound = await context.newPage();
  await rebound.route(`http://rebind.test:${port}/`, (route) =>
    route.fulfill({ status: 200, contentType: "text/html", body: rebindPage }),
  );
  await rebound.goto(`http://rebind.test:${port}/`);
  await rebound.waitForFunction(() => window.results && window.results.done, null, { timeout: 20000 });
  const rebind = await rebound.evaluate(() => window.results);
  console.log("rebound:", JSON.stringify(rebind));
  assert.match(rebind.call, /^403 /, "the rebound call was answered: " + rebind.call);
  assert.match(rebind.call, /"forbidden"/);
  assert.match(rebind.pending, /^403 /, "the rebound read was answered: " + rebind.pending);

  step("the UI is not served under the rebound name");
  const direct = await context.newPage();
  const response = await direct.goto(`http://rebind.test:${port}/`);
  assert.equal(response.status(), 403);

  step("nothing was proposed and nothing written");
  const pending = await fetch(base + "/hitl/pending", { headers: { Authorization: `Bearer ${admin}` } });
  assert.equal(pending.status, 200);
  const listed = await pending.json();
  assert.deepEqual(listed.approvals ?? listed, [], JSON.stringify(listed));
  const audit = await fetch(base + "/audit?limit=1000", { headers: { Authorization: `Bearer ${admin}` } });
  const records = JSON.stringify(await audit.json());
  for (const name of ["form-plain.txt", "fetch-plain.txt", "fetch-json.txt", "rebound.txt"]) {
    assert.ok(!existsSync(join(workspace, name)), name + " was written");
    assert.ok(!records.includes(name), name + " reached the broker: " + records);
  }
  assert.deepEqual(
    readdirSync(workspace).filter((name) => name !== ".airlock" && name !== "airlock.yaml"),
    [],
  );

  step("an agent's own call (no Origin, JSON) still works");
  const agent = await fetch(base + "/v1/tools/call", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: call("agent.txt"),
  });
  assert.equal(agent.status, 202, await agent.text());

  console.log(`ok: ${steps.length} steps`);
} finally {
  await browser.close();
  attacker.close();
  // SIGTERM stops the server cleanly: wait for it before removing its state.
  const exited = server.exitCode !== null || server.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => server.on("exit", resolve));
  server.kill();
  await exited;
  rmSync(workspace, { recursive: true, force: true });
}
