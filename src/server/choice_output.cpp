// ChoiceOutput wiring; random ids.
#include "server/choice_output.h"

#include <random>

namespace hearth::server {

std::string random_id(std::string_view prefix, int length) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  for (int i = 0; i < length; ++i) id.push_back(kAlphabet[pick(rng)]);
  return id;
}

ChoiceOutput::ChoiceOutput(const ChoiceOutputOptions& options)
    : stop_(options.stop), tool_id_prefix_(options.tool_id_prefix) {
  if (options.parse_reasoning) {
    reasoning_ = std::make_unique<text::ReasoningParser>(options.starts_in_reasoning);
  }
  if (options.tool_format != text::ToolCallFormat::kNone) {
    tools_ = std::make_unique<text::ToolCallParser>(options.tool_format);
  }
}

void ChoiceOutput::content(std::vector<text::ToolCallEvent> events, std::vector<OutputDelta>& out) {
  for (auto& e : events) {
    if (e.is_call) {
      OutputDelta d;
      d.kind = OutputDelta::Kind::kToolCall;
      d.call = {random_id(tool_id_prefix_), std::move(e.call.name), std::move(e.call.arguments)};
      d.tool_index = next_tool_index_++;
      out.push_back(std::move(d));
    } else if (!e.text.empty()) {
      if (!out.empty() && out.back().kind == OutputDelta::Kind::kContent) {
        out.back().text += e.text;
      } else {
        out.push_back({OutputDelta::Kind::kContent, std::move(e.text), {}, 0});
      }
    }
  }
}

void ChoiceOutput::route(std::string_view text, std::vector<OutputDelta>& out) {
  auto to_content = [&](std::string_view t) {
    if (tools_) {
      content(tools_->push(t), out);
    } else {
      content({{false, std::string(t), {}}}, out);
    }
  };
  if (!reasoning_) return to_content(text);
  for (auto& piece : reasoning_->push(text)) {
    if (piece.reasoning) {
      if (!out.empty() && out.back().kind == OutputDelta::Kind::kReasoning) {
        out.back().text += piece.text;
      } else {
        out.push_back({OutputDelta::Kind::kReasoning, std::move(piece.text), {}, 0});
      }
    } else {
      to_content(piece.text);
    }
  }
}

void ChoiceOutput::push(std::string_view piece, std::vector<OutputDelta>& out) {
  if (finished_ || stop_.stopped()) return;
  auto r = stop_.push(piece);
  if (!r.text.empty()) route(r.text, out);
  if (r.stopped) {
    matched_stop_ = r.matched;
    finish(out);
  }
}

void ChoiceOutput::finish(std::vector<OutputDelta>& out) {
  if (finished_) return;
  finished_ = true;
  std::string tail = stop_.flush();
  if (!tail.empty()) route(tail, out);
  if (reasoning_) {
    for (auto& piece : reasoning_->flush()) {
      if (piece.reasoning) {
        out.push_back({OutputDelta::Kind::kReasoning, std::move(piece.text), {}, 0});
      } else if (tools_) {
        content(tools_->push(piece.text), out);
      } else {
        content({{false, std::move(piece.text), {}}}, out);
      }
    }
  }
  if (tools_) content(tools_->finish(), out);
}

}  // namespace hearth::server
