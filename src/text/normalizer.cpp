// NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Strip, StripAccents, Prepend, Replace,
// ByteLevel and Sequence, with the reference's per-character semantics.
#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "text/byte_level.h"
#include "text/pattern.h"
#include "text/utf8.h"

namespace hearth::text {
namespace {

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  Status normalize(std::string& text) const override {
    if (is_ascii(text)) return ok_status();  // every form is the identity on ASCII
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                      static_cast<utf8proc_ssize_t>(text.size()), &out,
                                      static_cast<utf8proc_option_t>(options_));
    if (n < 0) return invalid_argument_error("unicode normalization: {}", utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return ok_status();
  }

 private:
  int options_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  Status normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      auto b = static_cast<unsigned char>(text[i]);
      if (b < 0x80) {
        out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
        ++i;
        continue;
      }
      uint32_t cp = next_codepoint(text, i);
      if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping
        out.append("i\xCC\x87");
        continue;
      }
      append_utf8(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    text = std::move(out);
    return ok_status();
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_whitespace(next_codepoint(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      // Walk forward remembering where the trailing whitespace run starts.
      size_t i = begin, run = end;
      bool in_run = false;
      while (i < end) {
        size_t at = i;
        bool ws = is_whitespace(next_codepoint(text, i));
        if (ws && !in_run) run = at;
        in_run = ws;
      }
      if (in_run) end = run;
    }
    text = text.substr(begin, end - begin);
    return ok_status();
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  Status normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      size_t at = i;
      uint32_t cp = next_codepoint(text, i);
      if (!is_nonspacing_mark(cp)) out.append(text, at, i - at);
    }
    text = std::move(out);
    return ok_status();
  }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  Status normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
    return ok_status();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status normalize(std::string& text) const override {
    HEARTH_ASSIGN_OR_RETURN(text, pattern_.replace_all(text, content_));
    return ok_status();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  Status normalize(std::string& text) const override {
    text = byte_level_encode(text);
    return ok_status();
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status normalize(std::string& text) const override {
    for (const auto& step : steps_) HEARTH_RETURN_IF_ERROR(step->normalize(text));
    return ok_status();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Result<unique_ptr<Base>> from a derived component (two conversions in one step).
template <typename T, typename... Args>
Result<std::unique_ptr<Normalizer>> make(Args&&... args) {
  return std::unique_ptr<Normalizer>(std::make_unique<T>(std::forward<Args>(args)...));
}

}  // namespace

Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return parse_error("normalizer without a \"type\": {}", config.dump());
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "NFC") return make<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return make<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") {
    return make<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "NFKD") {
    return make<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "Lowercase") return make<LowercaseNormalizer>();
  if (type == "StripAccents") return make<StripAccentsNormalizer>();
  if (type == "ByteLevel") return make<ByteLevelNormalizer>();
  if (type == "Strip") {
    return make<StripNormalizer>(config.value("strip_left", true),
                                 config.value("strip_right", true));
  }
  if (type == "Prepend") {
    return make<PrependNormalizer>(config.value("prepend", std::string()));
  }
  if (type == "Replace") {
    if (!config.contains("pattern")) return parse_error("Replace normalizer without a pattern");
    HEARTH_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(config["pattern"]));
    return make<ReplaceNormalizer>(std::move(pattern), config.value("content", std::string()));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    auto it = config.find("normalizers");
    if (it == config.end() || !it->is_array()) return parse_error("Sequence without normalizers");
    for (const auto& child : *it) {
      HEARTH_ASSIGN_OR_RETURN(auto step, make_normalizer(child));
      steps.push_back(std::move(step));
    }
    return make<SequenceNormalizer>(std::move(steps));
  }
  return unsupported_error("unsupported normalizer type '{}'", type);
}

}  // namespace hearth::text
