// Starts `hearth serve` on a free port for a black-box test and stops it with SIGTERM,
// asserting a clean exit 0. Usage: const srv = await startServer(hearthPath, [args]).
import { spawn } from "node:child_process";

export async function startServer(hearth, args = []) {
  const child = spawn(hearth, ["serve", ...args, "--port", "0"], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + log)), 60000);
    child.stderr.on("data", (d) => {
      log += d.toString();
      const m = log.match(/serving .* on http:\/\/[\d.]+:(\d+)\/v1/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on("exit", (code) => reject(new Error(`server exited ${code}:\n${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    base,
    port,
    log: () => log,
    async stop() {
      const code = await new Promise((resolve) => {
        child.removeAllListeners("exit");
        child.on("exit", (c) => resolve(c));
        child.kill("SIGTERM");
      });
      if (code !== 0) throw new Error(`server exited ${code} on SIGTERM:\n${log}`);
    },
  };
}
