// UTF-8 decoding and Python-compatible case mapping / whitespace rules on top of utf8proc.
#include "text/jinja/unicode.h"

#include <utf8proc.h>

namespace hearth::text::jinja {

char32_t decode_utf8(std::string_view s, size_t& i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  char32_t cp = c & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    unsigned char cc = byte(i + k);
    if ((cc & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
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
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
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
