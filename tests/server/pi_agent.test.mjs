// Black-box: the pi coding agent (@mariozechner/pi-coding-agent), configured through its
// models.json with a custom baseUrl, completes one prompt against `hearth serve`.
// Usage: node pi_agent.test.mjs <hearth binary> <model dir>
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { test, after, before } from "node:test";
import { startServer } from "./serve_harness.mjs";

const [hearth, modelDir] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const pi = path.join(here, "..", "node_modules", ".bin", "pi");
let srv;

before(async () => {
  srv = await startServer(hearth, [modelDir]);
});
after(async () => srv && (await srv.stop()));

test("pi completes one prompt through hearth's OpenAI API", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "hearth-pi-"));
  fs.writeFileSync(path.join(dir, "models.json"), JSON.stringify({
    providers: {
      hearth: {
        baseUrl: `${srv.base}/v1`,
        api: "openai-completions",
        apiKey: "none",
        compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
        models: [{ id: "hearth-model", contextWindow: 2048, maxTokens: 32, reasoning: false, input: ["text"] }],
      },
    },
  }));
  const run = spawnSync(pi, ["-p", "Say hello", "--model", "hearth/hearth-model", "--no-session"], {
    cwd: dir, env: { ...process.env, PI_CODING_AGENT_DIR: dir }, encoding: "utf8", timeout: 180000,
  });
  assert.equal(run.status, 0, `pi failed:\n${run.stdout}\n${run.stderr}`);
  assert.ok(run.stdout.trim().length > 0, "pi printed no answer");
  const stats = await (await fetch(`${srv.base}/stats`)).json();
  assert.ok(stats.requests_total >= 1);
  assert.equal(stats.requests_failed, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});
