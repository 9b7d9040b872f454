// UTF-8 decoding and Python-compatible case mapping / whitespace rules on top of utf8proc.
#include "text/jinja/unicode.h"

#include <utf8proc.h>

#include "text/utf8.h"

namespace hearth::text::jinja {

char32_t decode_utf8(std::string_view s, size_t& i) {
  if (text::utf8_sequence_length(s, i) < 0) {
    ++i;
    return static_cast<char32_t>(text::kReplacementChar);
  }
  return static_cast<char32_t>(text::next_codepoint(s, i));
}

std::vector<size_t> codepoint_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    offsets.push_back(i);
    decode_utf8(s, i);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t codepoint_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    decode_utf8(s, i);
    ++n;
  }
  return n;
}

bool is_py_space(char32_t cp) {
  // Python adds the ASCII information separators (FS, GS, RS, US) to White_Space.
  return text::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> strip_set;
  if (chars != nullptr) {
    for (size_t i = 0; i < chars->size();) strip_set.push_back(decode_utf8(*chars, i));
  }
  auto strippable = [&](char32_t cp) {
    if (chars == nullptr) return is_py_space(cp);
    for (char32_t c : strip_set) {
      if (c == cp) return true;
    }
    return false;
  };
  std::vector<size_t> offsets = codepoint_offsets(s);
  size_t n = offsets.size() - 1;
  size_t begin = 0, end = n;
  auto cp_at = [&](size_t k) {
    size_t i = offsets[k];
    return decode_utf8(s, i);
  };
  if (left) {
    while (begin < end && strippable(cp_at(begin))) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cp_at(end - 1))) --end;
  }
  return std::string(s.substr(offsets[begin], offsets[end] - offsets[begin]));
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {
    for (size_t i = 0; i <= s.size();) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i == s.size()) break;
      size_t start = i;
      decode_utf8(s, i);
      out += s.substr(start, i - start);
    }
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(from, pos);
    if (p == std::string_view::npos) break;
    out += s.substr(pos, p - pos);
    out += to;
    pos = p + from.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

namespace {

template <typename Fn>
std::string map_codepoints(std::string_view s, Fn fn) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_utf8(out, fn(decode_utf8(s, i)));
  return out;
}

char32_t to_upper(char32_t cp) { return static_cast<char32_t>(utf8proc_toupper(cp)); }
char32_t to_lower(char32_t cp) { return static_cast<char32_t>(utf8proc_tolower(cp)); }
char32_t to_title(char32_t cp) { return static_cast<char32_t>(utf8proc_totitle(cp)); }

bool is_cased(char32_t cp) {
  return is_py_cased_upper(cp) || is_py_cased_lower(cp) ||
         utf8proc_category(cp) == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string py_upper(std::string_view s) { return map_codepoints(s, to_upper); }
std::string py_lower(std::string_view s) { return map_codepoints(s, to_lower); }

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = decode_utf8(s, i);
    append_utf8(out, first ? to_title(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = decode_utf8(s, i);
    append_utf8(out, prev_cased ? to_lower(cp) : to_title(cp));
    prev_cased = is_cased(cp);
  }
  return out;
}

bool is_py_alpha(char32_t cp) {
  auto cat = utf8proc_category(cp);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

bool is_py_digit(char32_t cp) {
  auto cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_ND;
}

bool is_py_cased_upper(char32_t cp) { return utf8proc_category(cp) == UTF8PROC_CATEGORY_LU; }
bool is_py_cased_lower(char32_t cp) { return utf8proc_category(cp) == UTF8PROC_CATEGORY_LL; }

}  // namespace hearth::text::jinja
