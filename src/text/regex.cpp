// PCRE2 wrapper. Matching runs through the JIT when it compiled; a pattern that needs more
// JIT stack than the default retries with a larger stack allocated for that call.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "text/utf8.h"

namespace hearth::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int error) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(error, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
};

struct JitStack {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  JitStack() {
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~JitStack() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

// Oniguruma's Unicode \w (letters, marks, decimal and letter numbers, connector
// punctuation, and the Latin-1 fractions and superscripts) differs from PCRE2's (letters,
// numbers, underscore), so \w and \W are spelled out.
constexpr std::string_view kWordClass =
    R"(\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";

std::string to_pcre2_dialect(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      if (e == 'w') {
        out += in_class ? std::string(kWordClass) : "[" + std::string(kWordClass) + "]";
      } else if (e == 'W' && !in_class) {
        out += "[^" + std::string(kWordClass) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // literal ]
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Result<Regex> Regex::compile(std::string_view original) {
  const std::string pattern = to_pcre2_dialect(original);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return parse_error("regex '{}' does not compile at offset {}: {}", original, offset,
                       pcre2_message(error));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.code_ = std::move(owned);
  regex.pattern_ = std::string(original);
  return regex;
}

Status Regex::find_all(std::string_view text, std::vector<RegexMatch>& out) const {
  MatchData md(code_->code);
  if (md.data == nullptr) return out_of_memory_error("regex match data");
  std::unique_ptr<JitStack> big_stack;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc;
    for (;;) {
      pcre2_match_context* context = big_stack ? big_stack->context : nullptr;
      rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), pos, 0, md.data, context)
                      : pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                                    md.data, context);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !big_stack) {
        big_stack = std::make_unique<JitStack>();
        continue;
      }
      break;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return internal_error("regex '{}' failed: {}", pattern_, pcre2_message(rc));
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    size_t start = ov[0], end = ov[1];
    out.push_back({start, end});
    if (end > start) {
      pos = end;
    } else {
      if (end >= text.size()) break;
      pos = end + utf8_length_of_lead(static_cast<unsigned char>(text[end]));
    }
  }
  return ok_status();
}

}  // namespace hearth::text
