// Split behaviors, folded over match/gap segments exactly as the reference folds them.
#include "text/split.h"

#include <algorithm>

namespace hearth::text {

Result<SplitBehavior> parse_split_behavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported_error("unsupported split behavior '{}'", name);
}

void segments_from_matches(size_t size, const std::vector<RegexMatch>& matches, bool invert,
                           std::vector<Segment>& out) {
  if (size == 0) {
    out.push_back({0, 0, invert});
    return;
  }
  size_t prev = 0;
  for (const RegexMatch& m : matches) {
    if (prev != m.start) out.push_back({prev, m.start, invert});
    out.push_back({m.start, m.end, !invert});
    prev = m.end;
  }
  if (prev != size) out.push_back({prev, size, invert});
}

void split_piece(const Piece& piece, const std::vector<Segment>& segments, SplitBehavior behavior,
                 std::vector<Piece>& out) {
  // (range, removed) after applying the behavior.
  struct Cut {
    size_t start, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  cuts.reserve(segments.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) cuts.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) cuts.push_back({s.start, s.end, s.is_match});
      break;
    case SplitBehavior::kContiguous:
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !cuts.empty()) {
          cuts.back().end = s.end;
        } else {
          cuts.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !cuts.empty()) {
          cuts.back().end = s.end;
        } else {
          cuts.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !cuts.empty()) {
          cuts.back().start = it->start;
        } else {
          cuts.push_back({it->start, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
  }
  for (const Cut& c : cuts) {
    if (c.remove || c.end == c.start) continue;
    out.push_back({piece.text.substr(c.start, c.end - c.start), piece.at_origin && c.start == 0});
  }
}

}  // namespace hearth::text
