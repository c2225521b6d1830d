// Shared by the browser tests: runs `airlock init` and then starts
// `airlock serve --http 127.0.0.1:0` in `workspace` with no tokens
// configured, as a newcomer would, and waits for the login URL it prints
// once (the generated admin token in its fragment).

import { spawn, spawnSync } from "node:child_process";

export async function startAirlock(workspace) {
  const init = spawnSync(process.env.AIRLOCK_BIN, ["init"], { cwd: workspace, encoding: "utf8" });
  if (init.status !== 0) throw new Error(`airlock init failed (${init.status}): ${init.stderr}`);
  const server = spawn(process.env.AIRLOCK_BIN, ["serve", "--http", "127.0.0.1:0"], {
    cwd: workspace,
    env: { ...process.env, AIRLOCK_USER: "browser-test" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let serverLog = "";
  const login = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no login URL in: " + serverLog)), 30000);
    server.stderr.on("data", (chunk) => {
      serverLog += chunk;
      const found = serverLog.match(/approvals at (http:\/\/\S+#token=\S+)/);
      if (found) {
        clearTimeout(timer);
        resolve(found[1]);
      }
    });
    server.on("exit", (code) => reject(new Error(`airlock exited (${code}): ${serverLog}`)));
  });
  return { server, login, base: new URL(login).origin };
}
