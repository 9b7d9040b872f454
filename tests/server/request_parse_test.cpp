// Request parsing: valid bodies of each API map onto the neutral request; invalid ones
// raise an error naming the field; random and mutated bodies never crash (the in-suite
// counterpart of the libFuzzer target).
#include <gtest/gtest.h>

#include "text/utf8.h"

#include <random>
#include <string>

#include "server/generation_request.h"
#include "server/json_body.h"
#include "text/utf8.h"

namespace hearth::server {
namespace {

using nlohmann::json;

ApiError error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "expected an ApiException";
  return {};
}

TEST(JsonBody, RejectsBadBytes) {
  EXPECT_NE(error_of([] { parse_json_body("{\"a\": \"\xff\"}"); }).message.find("UTF-8"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json_body("{\"a\": [1, 2"); }).message.find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json_body("[1]"); }).message.find("JSON object"),
            std::string::npos);
  std::string deep(100000, '[');
  EXPECT_NE(error_of([&] { parse_json_body("{\"a\":" + deep); }).message.find("deeper"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json_body(""); }).message.find("empty"), std::string::npos);
  // Found by the fuzzer: a number past double's range throws out_of_range, not parse_error.
  EXPECT_NE(error_of([] { parse_json_body("7e383"); }).message.find("not valid JSON"),
            std::string::npos);
  EXPECT_EQ(text::find_invalid_utf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"),
            std::string::npos);
  EXPECT_EQ(text::find_invalid_utf8("\xc0\xaf"), 0u);        // overlong
  EXPECT_EQ(text::find_invalid_utf8("ab\xed\xa0\x80"), 2u);  // surrogate
}

TEST(ChatParse, MapsFields) {
  json body = json::parse(R"({
    "model": "gpt-4o", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "temperature": 0.5, "top_p": 0.9, "top_k": 40, "max_completion_tokens": 7, "n": 2,
    "stop": ["x", "y"], "seed": 3, "logprobs": true, "top_logprobs": 2, "stream": true,
    "stream_options": {"include_usage": true}, "logit_bias": {"5": -100},
    "chat_template_kwargs": {"enable_thinking": false},
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": "auto"})");
  GenerationRequest r = parse_chat_completions(body);
  EXPECT_EQ(r.model, "gpt-4o");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "hi\nthere");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["a"], 1);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop.size(), 2u);
  EXPECT_EQ(r.sampling.seed, 3u);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_TRUE(r.include_usage);
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.enable_thinking, false);
  EXPECT_EQ(r.tools.size(), 1u);
}

TEST(ChatParse, ErrorsNameTheField) {
  auto chat = [](const char* text) {
    return error_of([&] { parse_chat_completions(json::parse(text)); });
  };
  ApiError e = chat(R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "temperature");
  EXPECT_NE(e.message.find("expected a number"), std::string::npos) << e.message;
  e = chat(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})");
  EXPECT_EQ(e.param, "temperature");
  EXPECT_NE(e.message.find("<= 2"), std::string::npos) << e.message;
  e = chat(R"({"messages": []})");
  EXPECT_EQ(e.param, "messages");
  e = chat(R"({"model": "m"})");
  EXPECT_EQ(e.param, "messages");
  e = chat(R"({"messages": [{"role": "wizard", "content": "x"}]})");
  EXPECT_EQ(e.param, "messages[0].role");
  e = chat(R"({"messages": [{"role": "user", "content": 5}]})");
  EXPECT_EQ(e.param, "messages[0].content");
  e = chat(R"({"messages": [{"role": "user", "content": "x"}], "n": 0})");
  EXPECT_EQ(e.param, "n");
  e = chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})");
  EXPECT_EQ(e.param, "max_tokens");
  e = chat(
      R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": true})");
  EXPECT_EQ(e.param, "top_logprobs");
  e = chat(R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"abc": 1}})");
  EXPECT_EQ(e.param, "logit_bias");
  e = chat(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})");
  EXPECT_EQ(e.param, "tools[0].function.name");
  e = chat(
      R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})");
  EXPECT_EQ(e.param, "response_format.type");
}

TEST(MessagesParse, AnthropicShapes) {
  json body = json::parse(R"({
    "model": "claude-x", "max_tokens": 100, "system": [{"type": "text", "text": "sys"}],
    "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"},
        {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"c": "x"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "sunny"}]}]}],
    "tools": [{"name": "w", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any"}, "thinking": {"type": "enabled", "budget_tokens": 1000},
    "stop_sequences": ["\n\nHuman:"], "temperature": 1})");
  GenerationRequest r = parse_messages(body);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["content"], "sys");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["name"], "w");
  EXPECT_EQ(r.messages[2]["reasoning_content"], "hmm");
  EXPECT_EQ(r.messages[3]["role"], "tool");
  EXPECT_EQ(r.messages[3]["content"], "sunny");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_EQ(r.enable_thinking, true);
  EXPECT_EQ(r.max_tokens, 100);

  ApiError e = error_of(
      [] { parse_messages(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})")); });
  EXPECT_EQ(e.param, "max_tokens");
  e = error_of([] {
    parse_messages(json::parse(
        R"({"max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]})"));
  });
  EXPECT_EQ(e.param, "temperature");
}

TEST(ResponsesParse, InputItems) {
  json body = json::parse(R"({
    "model": "m", "instructions": "be nice", "max_output_tokens": 50,
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "add 2+2"}]},
      {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"a\":2}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "4"}],
    "tools": [{"type": "function", "name": "add", "parameters": {"type": "object"}}],
    "reasoning": {"effort": "high"}})");
  GenerationRequest r = parse_responses(body);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(r.messages[3]["role"], "tool");
  EXPECT_EQ(r.tools[0]["function"]["name"], "add");
  EXPECT_EQ(r.enable_thinking, true);
  EXPECT_EQ(r.max_tokens, 50);
  ApiError e = error_of(
      [] { parse_responses(json::parse(R"({"input": "x", "previous_response_id": "r"})")); });
  EXPECT_EQ(e.param, "previous_response_id");
}

// Random JSON values and byte mutations of valid bodies: every outcome is a parsed request
// or an ApiException, never a crash or another exception type.
json random_json(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 3 ? 4 : 6);
  static const char* kKeys[] = {"model",      "messages", "role",  "content",  "temperature",
                                "n",          "stop",     "tools", "function", "name",
                                "max_tokens", "input",    "type",  "text",     "tool_calls",
                                "arguments",  "system",   "top_p", "logprobs", "top_logprobs",
                                "logit_bias", "prompt",   "stream"};
  switch (kind(rng)) {
    case 0:
      return nullptr;
    case 1:
      return std::uniform_int_distribution<int>(-5, 300)(rng);
    case 2:
      return std::uniform_real_distribution<double>(-3, 3)(rng);
    case 3:
      return kKeys[rng() % std::size(kKeys)];
    case 4:
      return rng() % 2 == 0;
    case 5: {
      json a = json::array();
      for (int i = rng() % 4; i > 0; --i) a.push_back(random_json(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = rng() % 5; i > 0; --i) {
        o[kKeys[rng() % std::size(kKeys)]] = random_json(rng, depth + 1);
      }
      return o;
    }
  }
}

void parse_any(std::string_view body) {
  using Parser = GenerationRequest (*)(const json&);
  for (Parser p : {parse_chat_completions, parse_completions, parse_messages, parse_responses}) {
    try {
      json j = parse_json_body(body);
      p(j);
    } catch (const ApiException&) {
    }
  }
}

TEST(RequestFuzz, RandomBodiesNeverCrash) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    json body = random_json(rng, 0);
    if (!body.is_object()) body = json{{"messages", body}, {"input", body}, {"prompt", body}};
    if (rng() % 2)
      body["messages"] = json::array({{{"role", "user"}, {"content", random_json(rng, 2)}}});
    if (rng() % 3 == 0) body["max_tokens"] = random_json(rng, 3);
    EXPECT_NO_THROW(parse_any(body.dump()));
  }
  std::string valid =
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"input":"x","prompt":"p"})";
  for (int i = 0; i < 3000; ++i) {
    std::string s = valid;
    for (int k = 1 + rng() % 4; k > 0; --k) {
      std::size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[pos] = static_cast<char>(rng() % 256);
          break;
        case 1:
          s.erase(pos, 1);
          break;
        default:
          s.insert(pos, 1, "{}[]\",:0\\"[rng() % 9]);
      }
    }
    EXPECT_NO_THROW(parse_any(s));
  }
}

}  // namespace
}  // namespace hearth::server
