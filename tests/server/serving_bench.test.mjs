// Black-box: `hearth benchmark --url` (the serving benchmark) against the real `hearth serve`
// on the starter model, through the API with a key. Usage: node serving_bench.test.mjs <hearth> <model dir>
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { test, after, before } from "node:test";
import { startServer } from "./serve_harness.mjs";

const run = promisify(execFile);
const [hearth, modelDir] = process.argv.slice(2);
const KEY = "bench-key";
let srv;

before(async () => {
  srv = await startServer(hearth, [modelDir, "--api-key", KEY, "--batch", "4"]);
});
after(async () => srv && (await srv.stop()));

test("reports every concurrency level with latency percentiles and throughput", async () => {
  const { stdout } = await run(hearth, ["benchmark", "--url", srv.base, "--api-key", KEY,
    "--concurrency", "1,4", "--prompt-tokens", "24", "--tokens", "8", "--requests", "4", "--json"]);
  const report = JSON.parse(stdout);
  assert.deepEqual(report.levels.map((l) => l.concurrency), [1, 4]);
  for (const level of report.levels) {
    assert.equal(level.requests, 4);
    assert.equal(level.failed, 0, "every request succeeded");
    assert.ok(level.throughput_tok_s > 0);
    assert.ok(level.ttft_ms.p50 > 0 && level.ttft_ms.p99 >= level.ttft_ms.p50);
  }
});

test("a wrong key fails the run with a non-zero exit and a message", async () => {
  await assert.rejects(
    run(hearth, ["benchmark", "--url", srv.base, "--api-key", "wrong", "--concurrency", "1",
      "--prompt-tokens", "8", "--tokens", "2", "--requests", "1"]),
    (err) => err.code !== 0);
});

test("--url with a model directory is a usage error", async () => {
  await assert.rejects(run(hearth, ["benchmark", modelDir, "--url", srv.base]),
    (err) => err.code === 2 && /drop the model/.test(err.stderr));
});
