// Stop matching, <think> splitting and tool-call parsing over token streams split at
// every possible boundary, on outputs in each family's real format, partial and broken.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/choice_output.h"
#include "text/reasoning_parser.h"
#include "text/stop_matcher.h"
#include "text/tool_calls.h"

namespace hearth {
namespace {

using text::ToolCallFormat;

// Feeds `s` to the matcher in pieces of `step` bytes; returns (emitted, stopped).
std::pair<std::string, bool> run_stop(const std::vector<std::string>& stops, const std::string& s,
                                      std::size_t step) {
  text::StopMatcher m(stops);
  std::string out;
  for (std::size_t i = 0; i < s.size(); i += step) {
    auto r = m.push(s.substr(i, step));
    out += r.text;
    if (r.stopped) return {out, true};
  }
  out += m.flush();
  return {out, false};
}

TEST(StopMatcher, NeverEmitsStopTextAtAnySplit) {
  for (std::size_t step = 1; step <= 6; ++step) {
    auto [out, stopped] = run_stop({"END", "\n\n"}, "hello wor ENlD xEND tail", step);
    EXPECT_TRUE(stopped);
    EXPECT_EQ(out, "hello wor ENlD x") << step;
    auto [out2, stopped2] = run_stop({"END"}, "no stop here EN", step);
    EXPECT_FALSE(stopped2);
    EXPECT_EQ(out2, "no stop here EN") << step;
  }
}

TEST(StopMatcher, EarliestStopWinsAndIsReported) {
  text::StopMatcher m({"world", "lo w"});
  auto r = m.push("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hel");
  EXPECT_EQ(r.matched, "lo w");
  EXPECT_TRUE(m.push("more").stopped);
}

TEST(StopMatcher, HoldsBackOnlyPossiblePrefixes) {
  text::StopMatcher m({"</answer>"});
  auto r = m.push("abc</ans");
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(m.held(), 5u);
  r = m.push("wer!");  // "</answer!" is not the stop
  EXPECT_EQ(r.text, "</answer!");
  EXPECT_FALSE(r.stopped);
}

std::vector<text::ReasoningPiece> run_reasoning(const std::string& s, std::size_t step,
                                                bool inside) {
  text::ReasoningParser p(inside);
  std::vector<text::ReasoningPiece> all;
  auto add = [&](std::vector<text::ReasoningPiece> v) {
    for (auto& x : v) {
      if (!all.empty() && all.back().reasoning == x.reasoning) {
        all.back().text += x.text;
      } else {
        all.push_back(x);
      }
    }
  };
  for (std::size_t i = 0; i < s.size(); i += step) add(p.push(s.substr(i, step)));
  add(p.flush());
  return all;
}

TEST(ReasoningParser, SplitsThinkBlockAtAnyBoundary) {
  for (std::size_t step = 1; step <= 9; ++step) {
    auto v = run_reasoning("<think>\nLet me see.\n</think>\n\nThe answer is 4.", step, false);
    ASSERT_EQ(v.size(), 2u) << step;
    EXPECT_TRUE(v[0].reasoning);
    EXPECT_EQ(v[0].text, "Let me see.\n");
    EXPECT_FALSE(v[1].reasoning);
    EXPECT_EQ(v[1].text, "The answer is 4.");
  }
}

TEST(ReasoningParser, PromptOpenedBlockAndPlainOutput) {
  auto v = run_reasoning("hmm, 2+2.\n</think>\n\n4", 3, true);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].text, "hmm, 2+2.\n");
  EXPECT_EQ(v[1].text, "4");
  auto plain = run_reasoning("Just text with <think> inside later.", 4, false);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_FALSE(plain[0].reasoning);
  EXPECT_EQ(plain[0].text, "Just text with <think> inside later.");
  auto unterminated = run_reasoning("<think>still thinking", 2, false);
  ASSERT_EQ(unterminated.size(), 1u);
  EXPECT_TRUE(unterminated[0].reasoning);
  EXPECT_TRUE(text::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(text::prompt_opens_reasoning("<think>\n\n</think>\n\n"));
}

struct ToolRun {
  std::string text;
  std::vector<text::ParsedToolCall> calls;
};

ToolRun run_tools(ToolCallFormat f, const std::string& s, std::size_t step) {
  text::ToolCallParser p(f);
  ToolRun run;
  auto add = [&](std::vector<text::ToolCallEvent> events) {
    for (auto& e : events) {
      if (e.is_call) {
        run.calls.push_back(e.call);
      } else {
        run.text += e.text;
      }
    }
  };
  for (std::size_t i = 0; i < s.size(); i += step) add(p.push(s.substr(i, step)));
  add(p.finish());
  return run;
}

struct ToolCase {
  const char* name;
  ToolCallFormat format;
  std::string output;
  std::string text;                                        // expected text
  std::vector<std::pair<std::string, std::string>> calls;  // expected name, arguments
};

std::vector<ToolCase> tool_corpus() {
  return {
      {"qwen_single",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
       "</tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {"qwen_text_then_two_calls",
       ToolCallFormat::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
       "Let me check.\n\n",
       {{"a", "{}"}, {"b", R"({"x":[1,2]})"}}},
      {"qwen_unclosed_at_eos",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"</tool\"}}",
       "",
       {{"f", R"({"q":"</tool"})"}}},
      {"qwen_broken_json_is_text",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": }\n</tool_call> after",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": }\n</tool_call> after",
       {}},
      {"qwen_truncated_is_text",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"argu",
       "<tool_call>\n{\"name\": \"f\", \"argu",
       {}},
      {"qwen_string_arguments",
       ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
       "",
       {{"f", R"({"a":1})"}}},
      {"hermes_lookalike_text",
       ToolCallFormat::kHermes,
       "use <tool> tags <tool_cal",
       "use <tool> tags <tool_cal",
       {}},
      {"llama3_json",
       ToolCallFormat::kLlama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
       "",
       {{"get_weather", R"({"city":"Oslo"})"}}},
      {"llama3_python_tag_two",
       ToolCallFormat::kLlama3Json,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
       "{\"k\": true}}",
       "",
       {{"a", "{}"}, {"b", R"({"k":true})"}}},
      {"llama3_plain_answer",
       ToolCallFormat::kLlama3Json,
       "The weather is {sunny}.",
       "The weather is {sunny}.",
       {}},
      {"llama3_json_not_a_call",
       ToolCallFormat::kLlama3Json,
       "{\"answer\": 42}",
       "{\"answer\": 42}",
       {}},
      {"mistral_v3",
       ToolCallFormat::kMistral,
       "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
       "{\"name\": \"t\", \"arguments\": {}}]",
       "",
       {{"get_weather", R"({"city":"Rome"})"}, {"t", "{}"}}},
      {"mistral_v11",
       ToolCallFormat::kMistral,
       "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]now[ARGS]{}",
       "Sure. ",
       {{"get_weather", R"({"city":"Rome"})"}, {"now", "{}"}}},
      {"mistral_broken",
       ToolCallFormat::kMistral,
       "[TOOL_CALLS] [{\"name\": ",
       "[TOOL_CALLS] [{\"name\": ",
       {}},
      {"deepseek_v3",
       ToolCallFormat::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"city\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "",
       {{"get_weather", R"({"city":"Tokyo"})"}}},
      {"deepseek_v31",
       ToolCallFormat::kDeepSeekV3,
       "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜>"
       "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "ok",
       {{"f", R"({"a":1})"}, {"g", "{}"}}},
      {"deepseek_broken",
       ToolCallFormat::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{bad",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{bad",
       {}},
  };
}

TEST(ToolCallParser, CorpusAtEverySplit) {
  for (const auto& c : tool_corpus()) {
    for (std::size_t step : {1, 2, 3, 5, 7, 64, 4096}) {
      ToolRun r = run_tools(c.format, c.output, step);
      EXPECT_EQ(r.text, c.text) << c.name << " step " << step;
      ASSERT_EQ(r.calls.size(), c.calls.size()) << c.name << " step " << step;
      for (std::size_t i = 0; i < c.calls.size(); ++i) {
        EXPECT_EQ(r.calls[i].name, c.calls[i].first) << c.name;
        EXPECT_EQ(r.calls[i].arguments, c.calls[i].second) << c.name;
      }
    }
  }
}

TEST(ToolCallParser, DetectsFormatFromTemplate) {
  EXPECT_EQ(text::detect_tool_call_format("{{- '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(text::detect_tool_call_format("[TOOL_CALLS] {{ tool_calls|tojson }}"),
            ToolCallFormat::kMistral);
  EXPECT_EQ(text::detect_tool_call_format("<｜tool▁calls▁begin｜>"), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(text::detect_tool_call_format(
                "<|start_header_id|>{\"name\": ..., \"parameters\": ...}<|eot_id|>"),
            ToolCallFormat::kLlama3Json);
}

TEST(ChoiceOutput, StopThinkAndToolsTogether) {
  server::ChoiceOutputOptions o;
  o.stop = {"STOP"};
  o.tool_format = ToolCallFormat::kHermes;
  server::ChoiceOutput out(o);
  std::vector<server::OutputDelta> deltas;
  std::string s =
      "<think>plan</think>\n\nCalling.<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>"
      "STOP never seen";
  for (char c : s) out.push(std::string(1, c), deltas);
  out.finish(deltas);
  EXPECT_TRUE(out.stopped());
  EXPECT_EQ(out.matched_stop(), "STOP");
  std::string reasoning, content;
  int calls = 0;
  for (const auto& d : deltas) {
    if (d.kind == server::OutputDelta::Kind::kReasoning) reasoning += d.text;
    if (d.kind == server::OutputDelta::Kind::kContent) content += d.text;
    if (d.kind == server::OutputDelta::Kind::kToolCall) {
      ++calls;
      EXPECT_EQ(d.call.name, "f");
      EXPECT_EQ(d.call.id.rfind("call_", 0), 0u);
    }
  }
  EXPECT_EQ(reasoning, "plan");
  EXPECT_EQ(content, "Calling.");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace hearth
