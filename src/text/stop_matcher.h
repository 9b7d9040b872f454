// Stop sequences over a token stream: a stop string may span several tokens, so text that
// could be the start of one is held back until it is ruled out, and the stop text itself
// is never emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth::text {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Output {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop sequence matched; `text` is everything before it
    std::string matched;   // the stop sequence that matched
  };

  // Feeds the next decoded piece. After a stop, further input is ignored.
  Output push(std::string_view piece);
  // End of generation without a stop: releases the held-back tail.
  std::string flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back (for tests and accounting).
  std::size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace hearth::text
