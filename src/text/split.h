// How a piece of text is cut around pattern matches: HF tokenizers'
// SplitDelimiterBehavior (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/regex.h"

namespace hearth::text {

// One word-in-progress of the pre-tokenization pipeline.
struct Piece {
  std::string text;
  bool at_origin = false;  // starts at offset 0 of the original input (Metaspace "first")
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Result<SplitBehavior> parse_split_behavior(std::string_view name);

// A run of the piece's bytes, [start, end), that is or is not a match.
struct Segment {
  size_t start;
  size_t end;
  bool is_match;
};

// Covers [0, size) with the gaps between `matches` and the matches themselves (flags
// flipped when `invert`).
void segments_from_matches(size_t size, const std::vector<RegexMatch>& matches, bool invert,
                           std::vector<Segment>& out);

// Cuts `piece` along `segments` with `behavior`; appends the non-empty results to `out`.
void split_piece(const Piece& piece, const std::vector<Segment>& segments, SplitBehavior behavior,
                 std::vector<Piece>& out);

}  // namespace hearth::text
