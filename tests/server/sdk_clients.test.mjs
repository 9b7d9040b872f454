// Black-box: the official openai (v6) and @anthropic-ai/sdk clients, plus raw HTTP edge
// cases, against the real `hearth serve` binary serving a small model.
// Usage: node sdk_clients.test.mjs <hearth binary> <model dir>
import assert from "node:assert/strict";
import net from "node:net";
import { test, after, before } from "node:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { startServer } from "./serve_harness.mjs";

const [hearth, modelDir] = process.argv.slice(2);
let srv, openai, anthropic;

before(async () => {
  srv = await startServer(hearth, [modelDir, "--api-key", "test-key"]);
  openai = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: "test-key", maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: srv.base, apiKey: "test-key", maxRetries: 0 });
});
after(async () => srv && (await srv.stop()));

const messages = [{ role: "user", content: "Write a haiku about the sea." }];

test("openai: models.list and a chat completion", async () => {
  const models = await openai.models.list();
  assert.ok(models.data.length >= 1);
  const r = await openai.chat.completions.create({ model: "gpt-4o", messages, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, models.data[0].id);
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
});

test("openai: greedy streaming equals non-streaming; usage chunk", async () => {
  const body = { model: "m", messages, max_tokens: 16, temperature: 0 };
  const whole = await openai.chat.completions.create(body);
  const stream = await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test("openai: stop sequence is never emitted", async () => {
  const body = { model: "m", messages, max_tokens: 24, temperature: 0 };
  const whole = (await openai.chat.completions.create(body)).choices[0].message.content;
  assert.ok(whole.length > 6, whole);
  const stop = whole.slice(3, 6);
  const r = await openai.chat.completions.create({ ...body, stop: [stop] });
  assert.equal(r.choices[0].message.content, whole.slice(0, whole.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
  let streamed = "";
  for await (const c of await openai.chat.completions.create({ ...body, stop: stop, stream: true })) {
    streamed += c.choices[0]?.delta?.content ?? "";
  }
  assert.equal(streamed, whole.slice(0, whole.indexOf(stop)));
});

test("openai: n, seed, logprobs", async () => {
  const r = await openai.chat.completions.create({
    model: "m", messages, max_tokens: 8, n: 3, seed: 7, temperature: 1, logprobs: true, top_logprobs: 3,
  });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) {
    assert.equal(c.logprobs.content.length > 0, true);
    for (const lp of c.logprobs.content) {
      assert.ok(lp.logprob <= 0);
      assert.equal(lp.top_logprobs.length, 3);
    }
  }
  const again = await openai.chat.completions.create({
    model: "m", messages, max_tokens: 8, n: 3, seed: 7, temperature: 1,
  });
  assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));
});

test("openai: tools are accepted and the answer is well formed", async () => {
  const r = await openai.chat.completions.create({
    model: "m", max_tokens: 8, temperature: 0,
    messages: [
      { role: "user", content: "weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
  });
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
});

test("openai: completions and responses", async () => {
  const c = await openai.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 6, logprobs: 2 });
  assert.equal(c.object, "text_completion");
  // usage counts a final EOS (as vLLM does); it has no text, so no logprobs entry.
  const eos = c.choices[0].finish_reason === "stop" ? 1 : 0;
  assert.equal(c.choices[0].logprobs.tokens.length, c.usage.completion_tokens - eos);
  const r = await openai.responses.create({ model: "m", input: "Say hi", instructions: "Be brief", max_output_tokens: 8 });
  assert.equal(r.object, "response");
  assert.equal(typeof r.output_text, "string");
  const events = [];
  for await (const e of await openai.responses.create({ model: "m", input: "Say hi", max_output_tokens: 8, stream: true })) events.push(e.type);
  assert.equal(events[0], "response.created");
  assert.ok(["response.completed", "response.incomplete"].includes(events.at(-1)), events.join(","));
});

test("openai: errors are 4xx naming the field", async () => {
  await assert.rejects(openai.chat.completions.create({ model: "m", messages, temperature: 5 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "temperature");
    return true;
  });
  const long = [{ role: "user", content: "lorem ipsum ".repeat(3000) }];
  await assert.rejects(openai.chat.completions.create({ model: "m", messages: long, max_tokens: 5 }), (e) => e.status === 400 && /context length/.test(e.message));
  const bad = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});

test("anthropic: messages, streaming events, count_tokens, errors", async () => {
  const m = await anthropic.messages.create({ model: "claude-sonnet-4", max_tokens: 12, system: "You are terse.", messages });
  assert.equal(m.type, "message");
  assert.equal(m.content[0].type, "text");
  assert.ok(["end_turn", "max_tokens", "stop_sequence"].includes(m.stop_reason));
  const stream = anthropic.messages.stream({ model: "x", max_tokens: 12, messages, temperature: 0 });
  const types = [];
  stream.on("streamEvent", (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.equal(final.usage.output_tokens > 0, true);
  const count = await anthropic.messages.countTokens({ model: "x", messages });
  assert.ok(count.input_tokens > 0);
  await assert.rejects(anthropic.messages.create({ model: "x", max_tokens: 5, messages, temperature: 1.5 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.type, "error");
    assert.equal(e.error.error.type, "invalid_request_error");
    return true;
  });
});

function rawRequest(body, { keepOpen = false } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(srv.port, "127.0.0.1", () => sock.write(body));
    let data = "";
    sock.on("data", (d) => {
      data += d;
      if (keepOpen && keepOpen(data)) resolve({ sock, data });
    });
    sock.on("close", () => resolve({ data }));
  });
}

test("raw: bad bodies, disconnect mid-stream, keep-alive, server survives", async () => {
  const auth = "Authorization: Bearer test-key\r\n";
  const post = (body, extra = "") =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}Connection: close\r\n\r\n${body}`;
  let r = await rawRequest(post('{"messages": [}'));
  assert.match(r.data, /^HTTP\/1.1 400/);
  const invalid = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}]}')]);
  r = await rawRequest(Buffer.concat([Buffer.from(post("x".repeat(invalid.length)).split("\r\n\r\n")[0] + "\r\n\r\n"), invalid]));
  assert.match(r.data, /^HTTP\/1.1 400/);
  assert.match(r.data, /UTF-8/);
  r = await rawRequest(post("[".repeat(5000)));
  assert.match(r.data, /^HTTP\/1.1 400/);
  r = await rawRequest("GARBAGE\r\n\r\n");
  assert.match(r.data, /^HTTP\/1.1 400/);
  // Disconnect mid-stream: the request is cancelled and counted.
  const before = await (await fetch(`${srv.base}/stats`, { headers: { "x-api-key": "test-key" } })).json();
  const body = JSON.stringify({ model: "m", messages, max_tokens: 1000, stream: true });
  const s = await rawRequest(post(body).replace("Connection: close\r\n", ""), { keepOpen: (d) => d.includes('"content"') });
  s.sock.destroy();
  let after;
  for (let i = 0; i < 100; i++) {
    await new Promise((res) => setTimeout(res, 20));
    after = await (await fetch(`${srv.base}/stats`, { headers: { "x-api-key": "test-key" } })).json();
    if (after.requests_cancelled > before.requests_cancelled && after.requests_active === 0) break;
  }
  assert.equal(after.requests_cancelled, before.requests_cancelled + 1);
  assert.equal(after.requests_active, 0);
  // Keep-alive: fetch reuses its connection; many sequential requests all succeed.
  for (let i = 0; i < 5; i++) {
    const res = await fetch(`${srv.base}/health`);
    assert.equal(res.status, 200);
  }
  const metrics = await (await fetch(`${srv.base}/metrics`, { headers: { "x-api-key": "test-key" } })).text();
  assert.match(metrics, /hearth_requests_total \d+/);
});
