// Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit,
// CharDelimiterSplit, BertPreTokenizer and Sequence.
#include "text/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "text/byte_level.h"
#include "text/pattern.h"
#include "text/utf8.h"

namespace hearth::text {
namespace {

// GPT-2's word regex, what ByteLevel uses when use_regex is set.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Rust regex's \w+|[^\w\s]+ (Whitespace pre-tokenizer), spelled out in Unicode properties.
constexpr std::string_view kWordPattern =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|)"
    R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\p{White_Space}]+)";

Status split_each(std::vector<Piece>& pieces,
                  const std::function<Status(const Piece&, std::vector<Piece>&)>& fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 4);
  for (const Piece& p : pieces) HEARTH_RETURN_IF_ERROR(fn(p, out));
  pieces = std::move(out);
  return ok_status();
}

// Splits on every character satisfying `pred`, each one its own match.
void split_on_chars(const Piece& piece, const std::function<bool(uint32_t)>& pred,
                    SplitBehavior behavior, std::vector<Piece>& out) {
  std::vector<Segment> segs;
  const std::string& s = piece.text;
  size_t last = 0, i = 0;
  while (i < s.size()) {
    size_t at = i;
    if (pred(next_codepoint(s, i))) {
      if (last < at) segs.push_back({last, at, false});
      segs.push_back({at, i, true});
      last = i;
    }
  }
  if (last < s.size()) segs.push_back({last, s.size(), false});
  split_piece(piece, segs, behavior, out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<RegexMatch> matches;
    std::vector<Segment> segs;
    return split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      matches.clear();
      segs.clear();
      HEARTH_RETURN_IF_ERROR(pattern_.find_all(p.text, matches));
      segments_from_matches(p.text.size(), matches, invert_, segs);
      split_piece(p, segs, behavior_, out);
      return ok_status();
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  Status pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text = " " + p.text;
      }
    }
    if (regex_) {
      std::vector<RegexMatch> matches;
      std::vector<Segment> segs;
      HEARTH_RETURN_IF_ERROR(split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        matches.clear();
        segs.clear();
        HEARTH_RETURN_IF_ERROR(regex_->find_all(p.text, matches));
        segments_from_matches(p.text.size(), matches, false, segs);
        split_piece(p, segs, SplitBehavior::kIsolated, out);
        return ok_status();
      }));
    }
    if (map_bytes_) {
      for (Piece& p : pieces) p.text = byte_level_encode(p.text);
    }
    return ok_status();
  }
  bool defer_byte_mapping() override {
    map_bytes_ = false;
    return true;
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
  bool map_bytes_ = true;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {
    size_t i = 0;
    replacement_cp_ = replacement_.empty() ? 0 : next_codepoint(replacement_, i);
  }
  Status pre_tokenize(std::vector<Piece>& pieces) const override {
    return split_each(pieces, [&](const Piece& in, std::vector<Piece>& out) {
      Piece p{std::string(), in.at_origin};
      p.text.reserve(in.text.size() + replacement_.size());
      for (char c : in.text) {
        if (c == ' ') {
          p.text.append(replacement_);
        } else {
          p.text.push_back(c);
        }
      }
      bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts &&
          (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_origin))) {
        p.text = replacement_ + p.text;
      }
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        return ok_status();
      }
      uint32_t rep = replacement_cp_;
      split_on_chars(
          p, [rep](uint32_t cp) { return cp == rep; }, SplitBehavior::kMergedWithNext, out);
      return ok_status();
    });
  }

 private:
  std::string replacement_;
  uint32_t replacement_cp_;
  Prepend prepend_;
  bool split_;
};

// Splits on characters: Digits, Punctuation, WhitespaceSplit, CharDelimiterSplit.
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(std::function<bool(uint32_t)> pred, SplitBehavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  Status pre_tokenize(std::vector<Piece>& pieces) const override {
    return split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_on_chars(p, pred_, behavior_, out);
      return ok_status();
    });
  }

 private:
  std::function<bool(uint32_t)> pred_;
  SplitBehavior behavior_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) HEARTH_RETURN_IF_ERROR(step->pre_tokenize(pieces));
    return ok_status();
  }
  bool defer_byte_mapping() override {
    return !steps_.empty() && steps_.back()->defer_byte_mapping();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

Result<SplitBehavior> behavior_field(const nlohmann::json& config, SplitBehavior fallback) {
  auto it = config.find("behavior");
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_string()) return parse_error("split behavior must be a string");
  return parse_split_behavior(it->get<std::string>());
}

// Result<unique_ptr<Base>> from a derived component (two conversions in one step).
template <typename T, typename... Args>
Result<std::unique_ptr<PreTokenizer>> make(Args&&... args) {
  return std::unique_ptr<PreTokenizer>(std::make_unique<T>(std::forward<Args>(args)...));
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return parse_error("pre_tokenizer without a \"type\": {}", config.dump());
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "Split") {
    if (!config.contains("pattern")) return parse_error("Split pre_tokenizer without a pattern");
    HEARTH_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(config["pattern"]));
    HEARTH_ASSIGN_OR_RETURN(SplitBehavior behavior,
                            behavior_field(config, SplitBehavior::kIsolated));
    return make<SplitPreTokenizer>(std::move(pattern), behavior, config.value("invert", false));
  }
  if (type == "ByteLevel") {
    std::optional<Regex> regex;
    if (config.value("use_regex", true)) {
      HEARTH_ASSIGN_OR_RETURN(regex, Regex::compile(kGpt2Pattern));
    }
    return make<ByteLevelPreTokenizer>(config.value("add_prefix_space", true), std::move(regex));
  }
  if (type == "Metaspace") {
    std::string replacement = config.value("replacement", std::string("\xE2\x96\x81"));
    auto prepend = MetaspacePreTokenizer::Prepend::kAlways;
    if (auto it = config.find("prepend_scheme"); it != config.end() && it->is_string()) {
      std::string scheme = it->get<std::string>();
      if (scheme == "first") {
        prepend = MetaspacePreTokenizer::Prepend::kFirst;
      } else if (scheme == "never") {
        prepend = MetaspacePreTokenizer::Prepend::kNever;
      } else if (scheme != "always") {
        return unsupported_error("unsupported Metaspace prepend_scheme '{}'", scheme);
      }
    } else if (!config.value("add_prefix_space", true)) {
      prepend = MetaspacePreTokenizer::Prepend::kNever;
    }
    return make<MetaspacePreTokenizer>(std::move(replacement), prepend,
                                       config.value("split", true));
  }
  if (type == "Digits") {
    if (config.value("individual_digits", false)) {
      return make<CharSplitPreTokenizer>(is_numeric, SplitBehavior::kIsolated);
    }
    return make<CharSplitPreTokenizer>(is_numeric, SplitBehavior::kContiguous);
  }
  if (type == "Punctuation") {
    HEARTH_ASSIGN_OR_RETURN(SplitBehavior behavior,
                            behavior_field(config, SplitBehavior::kIsolated));
    return make<CharSplitPreTokenizer>(is_punctuation, behavior);
  }
  if (type == "WhitespaceSplit") {
    return make<CharSplitPreTokenizer>(is_whitespace, SplitBehavior::kRemoved);
  }
  if (type == "CharDelimiterSplit") {
    std::string delimiter = config.value("delimiter", std::string());
    size_t i = 0;
    if (delimiter.empty()) return parse_error("CharDelimiterSplit without a delimiter");
    uint32_t cp = next_codepoint(delimiter, i);
    return make<CharSplitPreTokenizer>([cp](uint32_t c) { return c == cp; },
                                       SplitBehavior::kRemoved);
  }
  if (type == "Whitespace") {
    HEARTH_ASSIGN_OR_RETURN(Pattern pattern, Pattern::regex(kWordPattern));
    return make<SplitPreTokenizer>(std::move(pattern), SplitBehavior::kRemoved, true);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(
        std::make_unique<CharSplitPreTokenizer>(is_whitespace, SplitBehavior::kRemoved));
    steps.push_back(
        std::make_unique<CharSplitPreTokenizer>(is_punctuation, SplitBehavior::kIsolated));
    return make<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Sequence") {
    auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array()) return parse_error("Sequence without pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& child : *it) {
      HEARTH_ASSIGN_OR_RETURN(auto step, make_pre_tokenizer(child));
      steps.push_back(std::move(step));
    }
    return make<SequencePreTokenizer>(std::move(steps));
  }
  return unsupported_error("unsupported pre_tokenizer type '{}'", type);
}

}  // namespace hearth::text
