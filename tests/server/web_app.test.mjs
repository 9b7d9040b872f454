// Black-box: the web app served by the real `hearth serve` binary on the starter model. The
// page's own streaming code (its <script id="hearth-stream"> block, taken from the served
// page) parses a real SSE response; the endpoints its JS names must exist.
// Usage: node web_app.test.mjs <hearth binary> <model dir>
import assert from "node:assert/strict";
import vm from "node:vm";
import { test, after, before } from "node:test";
import { startServer } from "./serve_harness.mjs";

const [hearth, modelDir] = process.argv.slice(2);
const KEY = "web-key";
const auth = { Authorization: `Bearer ${KEY}` };
let srv, page, lib;

function scripts(html) {
  return [...html.matchAll(/<script([^>]*)>([\s\S]*?)<\/script>/g)].map((m) => ({ attrs: m[1], code: m[2] }));
}

before(async () => {
  srv = await startServer(hearth, [modelDir, "--api-key", KEY]);
  const r = await fetch(`${srv.base}/`);
  page = await r.text();
  const stream = scripts(page).find((s) => s.attrs.includes('id="hearth-stream"'));
  assert.ok(stream, "the page has its hearth-stream script");
  lib = vm.runInNewContext(
    `${stream.code}\n;({ createSseParser, applyChatChunk, newAssistantTurn, apiErrorMessage })`, {});
});
after(async () => srv && (await srv.stop()));

test("/, /chat and /status serve the page as HTML without the API key", async () => {
  for (const path of ["/", "/chat", "/status"]) {
    const r = await fetch(srv.base + path);
    assert.equal(r.status, 200, path);
    assert.equal(r.headers.get("content-type"), "text/html; charset=utf-8");
    assert.match(r.headers.get("content-security-policy"), /connect-src 'self'/);
    assert.equal(await r.text(), page, path);
  }
  assert.equal((await fetch(`${srv.base}/stats`)).status, 401, "the API still needs the key");
});

test("the page is self-contained and its scripts compile", () => {
  assert.doesNotMatch(page, /https?:\/\//i, "no absolute URL: nothing from a CDN");
  assert.doesNotMatch(page, /<script[^>]*\bsrc=|@import|url\(/i, "no external script or style");
  for (const [, attr, value] of page.matchAll(/\b(href|src)="([^"]*)"/g)) {
    assert.match(value, /^(\/[a-z]*|data:.*)$/, `${attr}="${value}" stays on this server`);
  }
  const all = scripts(page);
  assert.ok(all.length >= 2);
  for (const s of all) new vm.Script(s.code);  // throws on a syntax error
});

test("every path the page names is a route of the server", async () => {
  const paths = new Set([...page.matchAll(/(["'`])(\/[A-Za-z0-9_.\/-]*)\1/g)].map((m) => m[2]));
  for (const p of ["/v1/chat/completions", "/v1/models", "/stats", "/health", "/chat", "/status"]) {
    assert.ok(paths.has(p), `the page uses ${p}`);
  }
  for (const p of paths) {
    const r = await fetch(srv.base + p, { headers: auth });
    assert.notEqual(r.status, 404, `${p} is not served`);
    await r.arrayBuffer();
  }
});

test("the status view's fields exist in /stats, /v1/models and /health", async () => {
  const stats = await (await fetch(`${srv.base}/stats`, { headers: auth })).json();
  for (const f of ["requests_total", "requests_active", "requests_failed", "requests_cancelled",
                   "mean_ttft_ms", "mean_latency_ms", "uptime_s"]) {
    assert.equal(typeof stats[f], "number", f);
  }
  assert.equal(typeof stats.http.connections_open, "number");
  const m = stats.models[0];
  assert.equal(typeof m.id, "string");
  assert.equal(typeof m.context_length, "number");
  assert.equal(typeof m.tool_call_format, "string");
  for (const f of ["running", "waiting", "preemptions", "blocks_total", "blocks_used", "blocks_free",
                   "blocks_cached", "blocks_idle", "block_size", "prefix_hit_rate", "prefix_hit_tokens",
                   "prefix_query_tokens", "generation_tokens_per_s", "prompt_tokens_per_s",
                   "generation_tokens_total", "prompt_tokens_total"]) {
    assert.equal(typeof m.engine[f], "number", `engine.${f}`);
    assert.ok(page.includes(`e.${f}`), `the page shows engine.${f}`);
  }
  const models = await (await fetch(`${srv.base}/v1/models`, { headers: auth })).json();
  assert.equal(models.data[0].id, m.id);
  const health = await (await fetch(`${srv.base}/health`)).json();
  assert.equal(health.model, m.id);
});

test("SSE parser: line endings, chunk cuts, comments, multi-line data, BOM", () => {
  const text = "\uFEFF: comment\r\nevent: ping\r\ndata: a\r\ndata:b\r\n\r\nid: 7\ndata: {\"x\": 1}\n\n" +
               "data: lone cr\r\rdata: dropped at end";
  const expected = [
    { event: "ping", data: "a\nb", id: "" },
    { event: "message", data: '{"x": 1}', id: "7" },
    { event: "message", data: "lone cr", id: "7" },
  ];
  for (const cut of [1, 2, 3, 5, 7, text.length]) {
    const got = [];
    const p = lib.createSseParser((e) => got.push({ ...e }));
    for (let i = 0; i < text.length; i += cut) p.push(text.slice(i, i + cut));
    p.end();
    assert.deepEqual(got, expected, `cut every ${cut}`);
  }
});

// Streams a chat completion through the page's parser, feeding the body in small uneven
// pieces so that events and lines straddle chunk boundaries.
async function streamChat(body, headers = auth) {
  const r = await fetch(`${srv.base}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!r.ok) return { status: r.status, text: await r.text() };
  assert.match(r.headers.get("content-type"), /^text\/event-stream/);
  const turn = lib.newAssistantTurn();
  let done = false;
  let events = 0;
  const parser = lib.createSseParser((e) => {
    events++;
    if (!done) done = !lib.applyChatChunk(turn, e.data);
  });
  const decoder = new TextDecoder();
  let seed = 1;
  for await (const bytes of r.body) {
    const s = decoder.decode(bytes, { stream: true });
    for (let i = 0; i < s.length;) {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      const n = 1 + (seed % 9);
      parser.push(s.slice(i, i + n));
      i += n;
    }
  }
  parser.end();
  return { status: r.status, turn, done, events };
}

test("the page's parser assembles a real stream into the non-streamed answer", async () => {
  const body = { model: "any", messages: [{ role: "user", content: "Tell me about the sea." }],
                 max_tokens: 24, temperature: 0 };
  const whole = await (await fetch(`${srv.base}/v1/chat/completions`, {
    method: "POST", headers: { "Content-Type": "application/json", ...auth }, body: JSON.stringify(body),
  })).json();
  const s = await streamChat(body);
  assert.equal(s.status, 200);
  assert.ok(s.done, "saw [DONE]");
  assert.ok(s.events > 3);
  assert.equal(s.turn.error, null);
  const msg = whole.choices[0].message;
  assert.equal(s.turn.content, msg.content ?? "");
  assert.equal(s.turn.reasoning, msg.reasoning_content ?? "");
  assert.ok(s.turn.content.length + s.turn.reasoning.length > 0);
  assert.equal(s.turn.finish_reason, whole.choices[0].finish_reason);
  assert.equal(s.turn.usage.completion_tokens, whole.usage.completion_tokens);
});

test("API errors read clearly: a missing key, a bad field", async () => {
  const messages = [{ role: "user", content: "hi" }];
  let s = await streamChat({ messages }, {});
  assert.equal(s.status, 401);
  const m401 = lib.apiErrorMessage(s.status, s.text);
  assert.match(m401, /^HTTP 401: missing or invalid API key/);
  assert.match(m401, /API key/);
  s = await streamChat({ messages, temperature: 9 });
  assert.equal(s.status, 400);
  assert.match(lib.apiErrorMessage(s.status, s.text), /^HTTP 400: Invalid 'temperature'/);
  assert.equal(lib.apiErrorMessage(502, "<html>bad gateway</html>"), "HTTP 502: <html>bad gateway</html>");
  // An error event mid-stream, then [DONE], as the server sends it.
  const turn = lib.newAssistantTurn();
  assert.equal(lib.applyChatChunk(turn, '{"error":{"message":"engine failed","type":"api_error"}}'), true);
  assert.equal(lib.applyChatChunk(turn, "[DONE]"), false);
  assert.equal(turn.error, "engine failed");
});

test("tool call deltas are folded by index", () => {
  const turn = lib.newAssistantTurn();
  const chunk = (delta, finish = null) =>
    JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] });
  lib.applyChatChunk(turn, chunk({ role: "assistant", content: "" }));
  lib.applyChatChunk(turn, chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function",
    function: { name: "get_weather", arguments: '{"city":' } }] }));
  lib.applyChatChunk(turn, chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }));
  lib.applyChatChunk(turn, chunk({ tool_calls: [{ index: 1, id: "call_2", type: "function",
    function: { name: "now", arguments: "{}" } }] }), "tool_calls");
  lib.applyChatChunk(turn, chunk({}, "tool_calls"));
  assert.equal(turn.tool_calls.length, 2);
  assert.equal(turn.tool_calls[0].function.name, "get_weather");
  assert.equal(turn.tool_calls[0].function.arguments, '{"city":"Oslo"}');
  assert.equal(turn.tool_calls[1].id, "call_2");
  assert.equal(turn.finish_reason, "tool_calls");
});

test("stop: aborting the fetch cancels the request on the server", async () => {
  const before = await (await fetch(`${srv.base}/stats`, { headers: auth })).json();
  const controller = new AbortController();
  const r = await fetch(`${srv.base}/v1/chat/completions`, {
    method: "POST", signal: controller.signal,
    headers: { "Content-Type": "application/json", ...auth },
    body: JSON.stringify({ messages: [{ role: "user", content: "Write a long story." }], stream: true,
                           max_tokens: 4000, ignore_eos: true }),
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  await reader.read();  // the stream has begun
  controller.abort();
  await reader.read().catch(() => {});
  let stats;
  for (let i = 0; i < 100; i++) {
    stats = await (await fetch(`${srv.base}/stats`, { headers: auth })).json();
    if (stats.requests_cancelled > before.requests_cancelled && stats.requests_active === 0) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(stats.requests_cancelled, before.requests_cancelled + 1);
  assert.equal(stats.requests_active, 0);
  assert.ok(stats.completion_tokens_total - before.completion_tokens_total < 4000);
});
