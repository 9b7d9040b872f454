// Splits a thinking model's output into reasoning and answer: the first <think>...</think>
// block is reasoning (OpenAI reasoning_content, Anthropic thinking blocks), the rest is
// content. Streaming-safe: a tag split across tokens is held back until it resolves.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth::text {

struct ReasoningPiece {
  bool reasoning = false;
  std::string text;
};

class ReasoningParser {
 public:
  // `starts_inside`: the prompt already opened the block (templates that end the
  // generation prompt with "<think>\n"), so output is reasoning until the close tag.
  explicit ReasoningParser(bool starts_inside = false, std::string open_tag = "<think>",
                           std::string close_tag = "</think>");

  std::vector<ReasoningPiece> push(std::string_view text);
  // End of output: releases held-back bytes (an unterminated block stays reasoning).
  std::vector<ReasoningPiece> flush();

  bool in_reasoning() const { return state_ == State::kInside; }

 private:
  enum class State { kBefore, kInside, kAfter };
  void emit(std::vector<ReasoningPiece>& out, bool reasoning, std::string_view text);

  std::string open_;
  std::string close_;
  State state_;
  std::string pending_;
  bool strip_leading_ = true;  // drop whitespace at the start of each section
};

// True when a rendered prompt ends inside an opened think block ("...<think>\n").
bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag = "<think>");

}  // namespace hearth::text
