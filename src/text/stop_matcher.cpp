// StopMatcher: earliest match wins; the hold-back is the longest pending suffix that is a
// proper prefix of some stop string.
#include "text/stop_matcher.h"

#include <algorithm>

namespace hearth::text {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Output StopMatcher::push(std::string_view piece) {
  Output out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  pending_.append(piece);
  if (stops_.empty()) {
    out.text = std::move(pending_);
    pending_.clear();
    return out;
  }
  std::size_t earliest = std::string::npos;
  const std::string* matched = nullptr;
  for (const auto& stop : stops_) {
    std::size_t pos = pending_.find(stop);
    if (pos < earliest) {
      earliest = pos;
      matched = &stop;
    }
  }
  if (earliest != std::string::npos) {
    out.text = pending_.substr(0, earliest);
    out.stopped = true;
    out.matched = *matched;
    stopped_ = true;
    pending_.clear();
    return out;
  }
  std::size_t hold = 0;
  for (const auto& stop : stops_) {
    std::size_t max_k = std::min(stop.size() - 1, pending_.size());
    for (std::size_t k = max_k; k > hold; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) ==
          std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  out.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out = stopped_ ? std::string() : std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace hearth::text
