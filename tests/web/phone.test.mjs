// A phone signs in with a token made by `airlock token create`, as the
// README says: no hashing by hand. Run by crates/airlock-cli/tests/web_ui.rs
// (same environment as ui.test.mjs).

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";

const { chromium } = await import(join(process.env.AIRLOCK_PLAYWRIGHT, "index.mjs"));
const shots = process.env.AIRLOCK_SHOTS;
mkdirSync(shots, { recursive: true });

const workspace = mkdtempSync(join(tmpdir(), "airlock-phone-"));
const env = { ...process.env, AIRLOCK_USER: "laptop-user" };
const airlock = (args) => {
  const run = spawnSync(process.env.AIRLOCK_BIN, args, { cwd: workspace, env, encoding: "utf8" });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
};
const steps = [];
const step = (name) => { steps.push(name); console.log("step:", name); };

step("airlock init, then a token for the phone");
assert.equal(airlock(["init"]).code, 0);
const made = airlock(["token", "create", "--name", "phone", "--role", "approver", "--user", "alice"]);
assert.equal(made.code, 0, made.stderr);
const token = made.stdout.split("\n")[1].trim();
assert.match(token, /^[0-9a-f]{64}$/);

step("serve --http on a port alone");
const server = spawn(process.env.AIRLOCK_BIN, ["serve", "--http", "0"], { cwd: workspace, env, stdio: ["ignore", "ignore", "pipe"] });
let log = "";
const base = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("no address in: " + log)), 30000);
  server.stderr.on("data", (chunk) => {
    log += chunk;
    const found = log.match(/serving MCP at (http:\/\/\S+)\/mcp/);
    if (found) { clearTimeout(timer); resolve(found[1]); }
  });
  server.on("exit", (code) => reject(new Error(`airlock exited (${code}): ${log}`)));
});
assert.match(base, /^http:\/\/127\.0\.0\.1:\d+$/);

const browser = await chromium.launch({
  executablePath: process.env.AIRLOCK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
try {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  const page = await context.newPage();
  const pageErrors = [];
  page.on("pageerror", (error) => pageErrors.push(String(error)));

  step("the phone opens the URL with its token and is signed in");
  await page.goto(`${base}/#token=${token}`);
  await page.locator("#live.on").waitFor({ timeout: 10000 });
  assert.ok(!page.url().includes("token="), "the token stays in the address bar");

  step("a change proposed at the laptop shows up and is approved from the phone");
  const proposed = airlock(["call", "write_file", "--args", JSON.stringify({ path: "from-laptop.txt", content: "hi\n" }), "--defer"]);
  assert.equal(proposed.code, 3, proposed.stderr);
  const id = JSON.parse(proposed.stdout).hitl.hitl_id;
  const card = page.locator(`li.card[data-id="${id}"]`);
  await card.waitFor({ timeout: 10000 });
  await page.screenshot({ path: join(shots, "10-phone-token-signed-in.png") });
  await card.locator("button.approve").tap();
  await card.locator(".outcome-text", { hasText: "Approved by alice via http and applied." }).waitFor({ timeout: 10000 });
  assert.equal(readFileSync(join(workspace, "from-laptop.txt"), "utf8"), "hi\n");

  step("once revoked, the phone's token is refused");
  assert.equal(airlock(["token", "revoke", "phone"]).code, 0);
  const deadline = Date.now() + 10000;
  let status = 0;
  while (Date.now() < deadline) {
    status = (await fetch(base + "/hitl/pending", { headers: { Authorization: `Bearer ${token}` } })).status;
    if (status === 401) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal(status, 401);
  assert.deepEqual(pageErrors, []);
  console.log(`ok: ${steps.length} steps`);
} finally {
  await browser.close();
  server.kill();
  if (!existsSync(workspace)) throw new Error("workspace vanished");
}
