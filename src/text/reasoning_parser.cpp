// ReasoningParser state machine: kBefore (only whitespace or a partial open tag seen),
// kInside (reasoning until the close tag), kAfter (everything is content).
#include "text/reasoning_parser.h"

#include <algorithm>

namespace hearth::text {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
std::size_t partial_suffix(std::string_view s, std::string_view tag) {
  std::size_t max_k = std::min(tag.size() - 1, s.size());
  for (std::size_t k = max_k; k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

ReasoningParser::ReasoningParser(bool starts_inside, std::string open_tag, std::string close_tag)
    : open_(std::move(open_tag)),
      close_(std::move(close_tag)),
      state_(starts_inside ? State::kInside : State::kBefore) {}

void ReasoningParser::emit(std::vector<ReasoningPiece>& out, bool reasoning,
                           std::string_view text) {
  if (strip_leading_) {
    std::size_t i = 0;
    while (i < text.size() && is_space(text[i])) ++i;
    text.remove_prefix(i);
    if (text.empty()) return;
    strip_leading_ = false;
  }
  if (!out.empty() && out.back().reasoning == reasoning) {
    out.back().text.append(text);
  } else {
    out.push_back({reasoning, std::string(text)});
  }
}

std::vector<ReasoningPiece> ReasoningParser::push(std::string_view text) {
  std::vector<ReasoningPiece> out;
  pending_.append(text);
  while (!pending_.empty()) {
    if (state_ == State::kAfter) {
      emit(out, false, pending_);
      pending_.clear();
      break;
    }
    if (state_ == State::kBefore) {
      std::size_t i = 0;
      while (i < pending_.size() && is_space(pending_[i])) ++i;
      std::string_view rest = std::string_view(pending_).substr(i);
      if (rest.empty()) break;  // only whitespace so far: wait
      if (rest.substr(0, std::min(rest.size(), open_.size())) ==
          std::string_view(open_).substr(0, std::min(rest.size(), open_.size()))) {
        if (rest.size() < open_.size()) break;  // a partial open tag: wait
        pending_.erase(0, i + open_.size());
        state_ = State::kInside;
        strip_leading_ = true;
        continue;
      }
      state_ = State::kAfter;
      continue;
    }
    // kInside
    std::size_t pos = pending_.find(close_);
    if (pos != std::string::npos) {
      emit(out, true, std::string_view(pending_).substr(0, pos));
      pending_.erase(0, pos + close_.size());
      state_ = State::kAfter;
      strip_leading_ = true;
      continue;
    }
    std::size_t hold = partial_suffix(pending_, close_);
    emit(out, true, std::string_view(pending_).substr(0, pending_.size() - hold));
    pending_.erase(0, pending_.size() - hold);
    break;
  }
  return out;
}

std::vector<ReasoningPiece> ReasoningParser::flush() {
  std::vector<ReasoningPiece> out;
  if (!pending_.empty()) {
    emit(out, state_ == State::kInside, pending_);
    pending_.clear();
  }
  return out;
}

bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag) {
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.size() >= open_tag.size() &&
         prompt.substr(prompt.size() - open_tag.size()) == open_tag;
}

}  // namespace hearth::text
