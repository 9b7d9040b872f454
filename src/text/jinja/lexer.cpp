// Jinja2's lexer rules (jinja2/lexer.py) restated over bytes: the root state finds the next tag,
// applies whitespace control to the data before it, and the tag states cut expression tokens,
// ignoring `}}` / `%}` while brackets are open.
#include "text/jinja/lexer.h"

#include <fmt/format.h>

#include <cstdlib>

#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Length of the Python whitespace code point at s[i], or 0.
size_t space_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  size_t j = i;
  char32_t cp = decode_utf8(s, j);
  return is_py_space(cp) ? j - i : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (size_t n = space_len(s, i)) i += n;
  return i;
}

// text.rstrip() in Python.
std::string_view rstrip(std::string_view text) {
  std::vector<size_t> offsets = codepoint_offsets(text);
  size_t end = offsets.size() - 1;
  while (end > 0 && space_len(text, offsets[end - 1]) != 0) --end;
  return text.substr(0, offsets[end]);
}

bool all_spaces(std::string_view text) { return skip_spaces(text, 0) == text.size(); }

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body.
Result<std::string> unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (int k = 0; k < digits; ++k) {
          int h = i + 1 < body.size() ? hex_value(body[i + 1]) : -1;
          if (h < 0) return parse_error("truncated \\{}{} escape", e, std::string(digits, 'X'));
          cp = cp * 16 + h;
          ++i;
        }
        if (cp > 0x10FFFF) return parse_error("illegal Unicode character");
        append_utf8(out, cp);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + (body[++i] - '0');
          }
          append_utf8(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) HEARTH_RETURN_IF_ERROR(root_step());
    push(TokenType::kEof, "");
    return std::move(tokens_);
  }

 private:
  std::string_view view() const { return src_; }

  void push(TokenType type, std::string value) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  Status error(std::string_view message) const {
    return parse_error("line {}: {}", line_, message);
  }

  // Data before a tag, with Jinja's OptionalLStrip rule.
  void emit_data(std::string_view text, char sign, bool lstrip_applies) {
    std::string_view kept = text;
    if (sign == '-') {
      kept = rstrip(text);
    } else if (sign != '+' && options_.lstrip_blocks && lstrip_applies) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() && all_spaces(text.substr(l_pos))) {
        kept = text.substr(0, l_pos);
      }
    }
    if (!kept.empty()) push(TokenType::kData, std::string(kept));
    line_ += count_newlines(text);
  }

  // Consumes a tag end at pos_: `-END\s*`, `+END` (blocks only) or `END` (+ newline when
  // trim applies). Returns false when none is there.
  bool consume_end(std::string_view end, bool allow_plus, bool trim) {
    std::string_view s = view();
    size_t start = pos_;
    if (s.compare(pos_, 1, "-") == 0 && s.compare(pos_ + 1, end.size(), end) == 0) {
      pos_ = skip_spaces(s, pos_ + 1 + end.size());
    } else if (allow_plus && s.compare(pos_, 1, "+") == 0 &&
               s.compare(pos_ + 1, end.size(), end) == 0) {
      pos_ += 1 + end.size();
    } else if (s.compare(pos_, end.size(), end) == 0) {
      pos_ += end.size();
      if (trim && options_.trim_blocks && pos_ < s.size() && s[pos_] == '\n') ++pos_;
    } else {
      return false;
    }
    std::string_view consumed = s.substr(start, pos_ - start);
    line_ += count_newlines(consumed);
    line_starting_ = consumed.back() == '\n';
    return true;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` at `at`; returns the position after it or npos.
  size_t match_raw_begin(size_t at) const {
    std::string_view s = view();
    size_t i = at + 2;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    i = skip_spaces(s, i);
    if (s.compare(i, 3, "raw") != 0) return std::string_view::npos;
    i = skip_spaces(s, i + 3);
    if (s.compare(i, 3, "-%}") == 0) return skip_spaces(s, i + 3);
    if (s.compare(i, 2, "%}") == 0) return i + 2;
    return std::string_view::npos;
  }

  Status root_step() {
    std::string_view s = view();
    size_t idx = pos_;
    while (true) {
      idx = s.find('{', idx);
      if (idx == std::string_view::npos || idx + 1 >= s.size()) {
        emit_data(s.substr(pos_), '\0', false);
        pos_ = s.size();
        return ok_status();
      }
      char k = s[idx + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++idx;
    }
    char kind = s[idx + 1];
    char sign = idx + 2 < s.size() && (s[idx + 2] == '-' || s[idx + 2] == '+') ? s[idx + 2] : '\0';
    std::string_view text = s.substr(pos_, idx - pos_);
    size_t raw_end = kind == '%' ? match_raw_begin(idx) : std::string_view::npos;
    emit_data(text, sign, kind != '{');
    if (raw_end != std::string_view::npos) {
      line_ += count_newlines(s.substr(idx, raw_end - idx));
      pos_ = raw_end;
      return raw_body();
    }
    pos_ = idx + 2 + (sign != '\0' ? 1 : 0);
    if (kind == '#') return comment_body();
    return tag_body(kind == '%');
  }

  Status comment_body() {
    std::string_view s = view();
    for (size_t p = pos_; p < s.size(); ++p) {
      bool at_end =
          s.compare(p, 3, "+#}") == 0 || s.compare(p, 3, "-#}") == 0 || s.compare(p, 2, "#}") == 0;
      if (!at_end) continue;
      line_ += count_newlines(s.substr(pos_, p - pos_));
      pos_ = p;
      consume_end("#}", true, true);
      return ok_status();
    }
    return error("Missing end of comment tag");
  }

  Status raw_body() {
    std::string_view s = view();
    for (size_t p = pos_; p + 1 < s.size(); ++p) {
      if (s[p] != '{' || s[p + 1] != '%') continue;
      size_t i = p + 2;
      char sign = i < s.size() && (s[i] == '-' || s[i] == '+') ? s[i] : '\0';
      if (sign != '\0') ++i;
      i = skip_spaces(s, i);
      if (s.compare(i, 6, "endraw") != 0) continue;
      i = skip_spaces(s, i + 6);
      size_t save = pos_;
      pos_ = i;
      int line_before = line_;
      bool line_starting_before = line_starting_;
      if (!consume_end("%}", true, true)) {
        pos_ = save;
        line_ = line_before;
        line_starting_ = line_starting_before;
        continue;
      }
      size_t after = pos_;
      int end_lines = line_ - line_before;
      bool ends_line = line_starting_;
      line_ = line_before;
      line_starting_ = line_starting_before;
      emit_data(s.substr(save, p - save), sign, true);
      line_ += count_newlines(s.substr(p, i - p)) + end_lines;
      line_starting_ = ends_line;
      pos_ = after;
      return ok_status();
    }
    return error("Missing end of raw directive");
  }

  Status tag_body(bool block) {
    push(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "");
    std::string_view s = view();
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s.size()) {
        return error(block ? "unexpected end of template, expected '%}'"
                           : "unexpected end of template, expected '}}'");
      }
      if (balance.empty()) {
        if (block && consume_end("%}", true, true)) {
          push(TokenType::kBlockEnd, "");
          return ok_status();
        }
        if (!block && consume_end("}}", false, false)) {
          push(TokenType::kVariableEnd, "");
          return ok_status();
        }
      }
      if (size_t n = space_len(s, pos_)) {
        line_ += s[pos_] == '\n';
        pos_ += n;
        continue;
      }
      char c = s[pos_];
      if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t start = pos_;
        while (pos_ < s.size() && is_name_char(s[pos_])) ++pos_;
        push(TokenType::kName, std::string(s.substr(start, pos_ - start)));
      } else if (c == '\'' || c == '"') {
        HEARTH_RETURN_IF_ERROR(lex_string(c));
      } else {
        HEARTH_RETURN_IF_ERROR(lex_operator(balance));
      }
    }
  }

  void lex_number() {
    std::string_view s = view();
    auto digits = [&](size_t i) {  // (\d+_)*\d+ starting at i; returns end or i
      size_t j = i;
      while (j < s.size() && is_digit(s[j])) {
        while (j < s.size() && is_digit(s[j])) ++j;
        if (j + 1 < s.size() && s[j] == '_' && is_digit(s[j + 1])) ++j;
      }
      return j;
    };
    size_t start = pos_;
    size_t end = digits(pos_);
    bool is_float = false;
    bool after_dot = start > 0 && s[start - 1] == '.';
    if (!after_dot) {
      size_t frac_end = end;
      if (frac_end + 1 < s.size() && s[frac_end] == '.' && is_digit(s[frac_end + 1])) {
        frac_end = digits(frac_end + 1);
      }
      size_t exp_end = frac_end;
      if (exp_end < s.size() && (s[exp_end] == 'e' || s[exp_end] == 'E')) {
        size_t k = exp_end + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && is_digit(s[k])) exp_end = digits(k);
      }
      if (exp_end != frac_end) {
        end = exp_end;
        is_float = true;
      } else if (frac_end != end) {
        end = frac_end;
        is_float = true;
      }
    }
    std::string text;
    for (char ch : s.substr(start, end - start)) {
      if (ch != '_') text += ch;
    }
    pos_ = end;
    push(is_float ? TokenType::kFloat : TokenType::kInteger, text);
    if (is_float) {
      tokens_.back().float_value = std::strtod(text.c_str(), nullptr);
    } else {
      tokens_.back().int_value = std::strtoll(text.c_str(), nullptr, 10);
    }
  }

  Status lex_string(char quote) {
    std::string_view s = view();
    size_t i = pos_ + 1;
    while (i < s.size() && s[i] != quote) i += s[i] == '\\' ? 2 : 1;
    if (i >= s.size()) return error("unexpected char '" + std::string(1, quote) + "'");
    auto body = unescape(s.substr(pos_ + 1, i - pos_ - 1));
    if (!body.ok()) return error(body.status().message());
    push(TokenType::kString, std::move(body).value());
    line_ += count_newlines(s.substr(pos_, i + 1 - pos_));
    pos_ = i + 1;
    return ok_status();
  }

  Status lex_operator(std::vector<char>& balance) {
    std::string_view s = view();
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (s.compare(pos_, 2, op) == 0) {
        push(TokenType::kOperator, std::string(op));
        pos_ += 2;
        return ok_status();
      }
    }
    char c = s[pos_];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      size_t j = pos_;
      decode_utf8(s, j);
      return error(fmt::format("unexpected char '{}'", s.substr(pos_, j - pos_)));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return error(fmt::format("unexpected '{}'", c));
      if (balance.back() != c) {
        return error(fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      }
      balance.pop_back();
    }
    push(TokenType::kOperator, std::string(1, c));
    ++pos_;
    return ok_status();
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source, const LexerOptions& options) {
  Lexer lexer(normalize_newlines(source, options.keep_trailing_newline), options);
  return lexer.run();
}

}  // namespace hearth::text::jinja
