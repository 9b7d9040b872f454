// ByteLevel, ByteFallback, Metaspace, Fuse, Strip, Replace, WordPiece, BPEDecoder and
// Sequence decoders.
#include "text/decoder.h"

#include <nlohmann/json.hpp>

#include "text/byte_level.h"
#include "text/pattern.h"
#include "text/utf8.h"

namespace hearth::text {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      size_t mark = bytes.size();
      if (!byte_level_decode(t, bytes)) {
        bytes.resize(mark);
        bytes += t;  // a token outside the alphabet (an added token) stays as it is
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
    return ok_status();
  }
};

// "<0xAB>" -> 0xAB, or -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (find_invalid_utf8(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int b = byte_token(t);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
    return ok_status();
  }
};

class FuseDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& t : tokens) joined += t;
    tokens.assign(1, std::move(joined));
    return ok_status();
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(uint32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<size_t> bounds;  // start byte of each char, then the end
      for (size_t i = 0; i < t.size();) {
        bounds.push_back(i);
        i += utf8_length_of_lead(static_cast<unsigned char>(t[i]));
      }
      size_t n = bounds.size();
      bounds.push_back(t.size());
      auto char_at = [&](size_t k) {
        size_t i = bounds[k];
        return next_codepoint(t, i);
      };
      size_t first = 0;
      while (first < start_ && first < n && char_at(first) == content_) ++first;
      size_t last = n;
      for (size_t k = 0; k < stop_ && last > first && char_at(last - 1) == content_; ++k) --last;
      t = t.substr(bounds[first], bounds[last] - bounds[first]);
    }
    return ok_status();
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      HEARTH_ASSIGN_OR_RETURN(t, pattern_.replace_all(t, content_));
    }
    return ok_status();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(uint32_t replacement, bool strip_first)
      : replacement_(replacement), strip_first_(strip_first) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      const std::string& t = tokens[k];
      std::string out;
      out.reserve(t.size());
      size_t i = 0;
      while (i < t.size()) {
        size_t at = i;
        uint32_t cp = next_codepoint(t, i);
        if (cp != replacement_) {
          out.append(t, at, i - at);
        } else if (!(k == 0 && strip_first_)) {
          out.push_back(' ');
        }
      }
      tokens[k] = std::move(out);
    }
    return ok_status();
  }

 private:
  uint32_t replacement_;
  bool strip_first_;
};

// WordPiece: "##" continuations glue to the previous token, others get a space.
class WordPieceDecoder final : public Decoder {
 public:
  explicit WordPieceDecoder(std::string prefix) : prefix_(std::move(prefix)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string& t = tokens[k];
      if (k != 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0) {
          t.erase(0, prefix_.size());
        } else {
          t = " " + t;
        }
      }
    }
    return ok_status();
  }

 private:
  std::string prefix_;
};

class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string replacement = k + 1 == tokens.size() ? "" : " ";
      if (suffix_.empty()) continue;
      size_t pos = 0;
      std::string& t = tokens[k];
      std::string out;
      size_t prev = 0;
      while ((pos = t.find(suffix_, prev)) != std::string::npos) {
        out.append(t, prev, pos - prev);
        out += replacement;
        prev = pos + suffix_.size();
      }
      out.append(t, prev);
      t = std::move(out);
    }
    return ok_status();
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) HEARTH_RETURN_IF_ERROR(step->decode_chain(tokens));
    return ok_status();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

uint32_t first_codepoint(const std::string& s) {
  size_t i = 0;
  return s.empty() ? 0 : next_codepoint(s, i);
}

// Result<unique_ptr<Base>> from a derived component (two conversions in one step).
template <typename T, typename... Args>
Result<std::unique_ptr<Decoder>> make(Args&&... args) {
  return std::unique_ptr<Decoder>(std::make_unique<T>(std::forward<Args>(args)...));
}

}  // namespace

Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return parse_error("decoder without a \"type\": {}", config.dump());
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "ByteLevel") return make<ByteLevelDecoder>();
  if (type == "ByteFallback") return make<ByteFallbackDecoder>();
  if (type == "Fuse") return make<FuseDecoder>();
  if (type == "Strip") {
    std::string content = config.value("content", std::string(" "));
    return make<StripDecoder>(first_codepoint(content), config.value("start", 0u),
                              config.value("stop", 0u));
  }
  if (type == "Replace") {
    if (!config.contains("pattern")) return parse_error("Replace decoder without a pattern");
    HEARTH_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(config["pattern"]));
    return make<ReplaceDecoder>(std::move(pattern), config.value("content", std::string()));
  }
  if (type == "Metaspace") {
    std::string replacement = config.value("replacement", std::string("\xE2\x96\x81"));
    bool strip_first = true;
    if (auto it = config.find("prepend_scheme"); it != config.end() && it->is_string()) {
      strip_first = it->get<std::string>() != "never";
    } else {
      strip_first = config.value("add_prefix_space", true);
    }
    return make<MetaspaceDecoder>(first_codepoint(replacement), strip_first);
  }
  if (type == "WordPiece") {
    if (config.value("cleanup", true)) {
      return unsupported_error("WordPiece decoder with cleanup=true is not supported");
    }
    return make<WordPieceDecoder>(config.value("prefix", std::string("##")));
  }
  if (type == "BPEDecoder") {
    return make<BpeSuffixDecoder>(config.value("suffix", std::string("</w>")));
  }
  if (type == "Sequence") {
    auto it = config.find("decoders");
    if (it == config.end() || !it->is_array()) return parse_error("Sequence without decoders");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& child : *it) {
      HEARTH_ASSIGN_OR_RETURN(auto step, make_decoder(child));
      steps.push_back(std::move(step));
    }
    return make<SequenceDecoder>(std::move(steps));
  }
  return unsupported_error("unsupported decoder type '{}'", type);
}

}  // namespace hearth::text
