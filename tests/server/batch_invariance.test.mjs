// Black-box (issue 6): a request's tokens do not depend on what else the server runs. The real
// `hearth serve` on the starter model with its default flags (on the CPU `--batch-invariant
// auto` is on); each request is sent alone, then all of them at once, greedy and seeded; and
// again on a server whose KV budget is so small that running requests are preempted and
// recomputed. Usage: node batch_invariance.test.mjs <hearth binary> <model dir>
import assert from "node:assert/strict";
import { test } from "node:test";
import { startServer } from "./serve_harness.mjs";

const [hearth, modelDir] = process.argv.slice(2);
const REQUESTS = 8;
const TOKENS = 40;

// Distinct prompts of distinct lengths, so the batch mixes prefill chunks and decode rows.
function prompt(i) {
  const words = ["river", "lantern", "orchard", "copper", "meadow", "harbor", "quiet", "ember"];
  const parts = [`Story ${i}:`];
  for (let w = 0; w < 3 + 5 * i; ++w) parts.push(words[(i + w * 3) % words.length]);
  return parts.join(" ");
}

async function complete(base, i, sampling) {
  const body = { model: "m", prompt: prompt(i), max_tokens: TOKENS, ignore_eos: true, ...sampling };
  if (sampling.seed !== undefined) body.seed = sampling.seed + i;
  const r = await fetch(`${base}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const out = await r.json();
  assert.equal(r.status, 200, JSON.stringify(out));
  assert.equal(out.usage.completion_tokens, TOKENS);
  return out.choices[0].text;
}

// Every request alone (one at a time), then all at once: the same texts.
async function aloneThenTogether(base, sampling) {
  const alone = [];
  for (let i = 0; i < REQUESTS; ++i) alone.push(await complete(base, i, sampling));
  const together = await Promise.all(alone.map((_, i) => complete(base, i, sampling)));
  for (let i = 0; i < REQUESTS; ++i) {
    assert.equal(together[i], alone[i], `request ${i} in a batch of ${REQUESTS} differs`);
  }
  return alone;
}

async function preemptions(base) {
  const metrics = await (await fetch(`${base}/metrics`)).text();
  const m = metrics.match(/^hearth_engine_preemptions (\d+)/m);
  assert.ok(m, "metrics carry the preemption counter");
  return Number(m[1]);
}

test("greedy and seeded requests are the same alone and in a batch", async () => {
  const srv = await startServer(hearth, [modelDir, "--threads", "2"]);
  try {
    const greedy = await aloneThenTogether(srv.base, { temperature: 0 });
    assert.ok(new Set(greedy).size > 1, "the prompts give different texts");
    await aloneThenTogether(srv.base, { temperature: 0.9, seed: 40 });
  } finally {
    await srv.stop();
  }
});

test("greedy requests are the same when preempted and recomputed", async () => {
  // KV for about a third of the eight requests' tokens (room for the longest alone): the newest
  // are preempted and come back.
  const srv = await startServer(hearth, [modelDir, "--threads", "2", "--kv-budget", "0.004"]);
  try {
    await aloneThenTogether(srv.base, { temperature: 0 });
    assert.ok((await preemptions(srv.base)) > 0, "the small KV budget preempted requests");
  } finally {
    await srv.stop();
  }
});
