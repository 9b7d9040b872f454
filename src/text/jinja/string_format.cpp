// Format-spec handling shared by %-formatting and str.format.
#include "text/jinja/string_format.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "text/jinja/py_format.h"
#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

struct Spec {
  char fill = ' ';
  char align = '\0';  // < > ^ =
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  bool thousands = false;
  char type = '\0';
};

std::string pad(std::string body, const Spec& spec, char default_align) {
  size_t len = codepoint_count(body);
  if (spec.width < 0 || len >= static_cast<size_t>(spec.width)) return body;
  size_t n = spec.width - len;
  char align = spec.align ? spec.align : default_align;
  char fill = spec.fill;
  if (align == '=') {
    size_t sign_len = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' '));
    return body.substr(0, sign_len) + std::string(n, fill) + body.substr(sign_len);
  }
  if (align == '<') return body + std::string(n, fill);
  if (align == '^') return std::string(n / 2, fill) + body + std::string(n - n / 2, fill);
  return std::string(n, fill) + body;
}

std::string with_sign(std::string digits, bool negative, char sign) {
  if (negative) return "-" + digits;
  if (sign == '+') return "+" + digits;
  if (sign == ' ') return " " + digits;
  return digits;
}

Result<std::string> format_number(const Value& v, Spec spec) {
  char type = spec.type;
  if (type == '\0') type = v.is_float() ? 'r' : 'd';
  if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o' ||
      type == 'b') {
    if (v.is_float()) {
      if (type != 'd' && type != 'i' && type != 'u') {
        return invalid_argument_error("Unknown format code '{}' for object of type 'float'", type);
      }
    }
    int64_t i = v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int();
    uint64_t mag = i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    std::string digits;
    if (type == 'x') {
      digits = fmt::format("{:x}", mag);
    } else if (type == 'X') {
      digits = fmt::format("{:X}", mag);
    } else if (type == 'o') {
      digits = fmt::format("{:o}", mag);
    } else if (type == 'b') {
      digits = fmt::format("{:b}", mag);
    } else {
      digits = std::to_string(mag);
      if (spec.thousands) {
        std::string grouped;
        for (size_t k = 0; k < digits.size(); ++k) {
          if (k > 0 && (digits.size() - k) % 3 == 0) grouped += ',';
          grouped += digits[k];
        }
        digits = grouped;
      }
    }
    return with_sign(digits, i < 0, spec.sign);
  }
  double d = v.as_double();
  std::string body;
  int precision = spec.precision < 0 ? 6 : spec.precision;
  bool negative = std::signbit(d) && !std::isnan(d);
  double mag = std::fabs(d);
  switch (type) {
    case 'f':
    case 'F':
      body = std::isfinite(mag) ? fmt::format("{:.{}f}", mag, precision)
                                : (std::isnan(mag) ? "nan" : "inf");
      break;
    case 'e':
    case 'E':
      body = fmt::format("{:.{}e}", mag, precision);
      break;
    case 'g':
    case 'G':
      body = fmt::format("{:.{}g}", mag, precision == 0 ? 1 : precision);
      break;
    case '%':
      body = fmt::format("{:.{}f}%", mag * 100, precision);
      break;
    case 'r':
      body = py_float_repr(mag);
      if (spec.precision >= 0) body = fmt::format("{:.{}g}", mag, std::max(spec.precision, 1));
      break;
    default:
      return invalid_argument_error("Unknown format code '{}' for object of type '{}'", type,
                                    v.type_name());
  }
  if (type == 'E' || type == 'G' || type == 'F') body = py_upper(body);
  return with_sign(body, negative, spec.sign);
}

Result<std::string> format_with_spec(const Value& v, Spec spec) {
  if (spec.zero && !spec.align) {
    spec.fill = '0';
    spec.align = '=';
  }
  if (v.is_number() && !(v.is_bool() && spec.type == '\0') && spec.type != 's') {
    HEARTH_ASSIGN_OR_RETURN(std::string body, format_number(v, spec));
    return pad(std::move(body), spec, '>');
  }
  if (spec.type != '\0' && spec.type != 's') {
    return invalid_argument_error("Unknown format code '{}' for object of type '{}'", spec.type,
                                  v.type_name());
  }
  std::string body = py_str(v);
  if (spec.precision >= 0) {
    std::vector<size_t> offsets = codepoint_offsets(body);
    if (static_cast<size_t>(spec.precision) + 1 < offsets.size()) {
      body.resize(offsets[spec.precision]);
    }
  }
  return pad(std::move(body), spec, '<');
}

int parse_int(const std::string& s, size_t& i) {
  int n = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') n = n * 10 + (s[i++] - '0');
  return n;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

Result<Spec> parse_spec(const std::string& s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    spec.zero = true;
    ++i;
  }
  if (i < s.size() && is_digit(s[i])) spec.width = parse_int(s, i);
  if (i < s.size() && s[i] == ',') {
    spec.thousands = true;
    ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    spec.precision = parse_int(s, i);
  }
  if (i < s.size()) spec.type = s[i++];
  if (i != s.size()) return invalid_argument_error("Invalid format specifier '{}'", s);
  return spec;
}

}  // namespace

Result<std::string> percent_format(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  bool mapping = args.is_dict();
  if (args.is_tuple()) {
    positional = args.items();
  } else if (!mapping) {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) return invalid_argument_error("incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    Value arg;
    bool have_arg = false;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos || !mapping) {
        return invalid_argument_error("format requires a mapping");
      }
      const Value* found = args.dict_data().find(format.substr(i + 1, close - i - 1));
      if (found == nullptr) {
        return invalid_argument_error("KeyError: '{}'", format.substr(i + 1, close - i - 1));
      }
      arg = *found;
      have_arg = true;
      i = close + 1;
    }
    Spec spec;
    spec.align = '>';
    for (; i < format.size(); ++i) {
      char c = format[i];
      if (c == '-') {
        spec.align = '<';
      } else if (c == '+' || c == ' ') {
        spec.sign = c;
      } else if (c == '0') {
        spec.zero = true;
      } else if (c == '#') {
        spec.alternate = true;
      } else {
        break;
      }
    }
    if (i < format.size() && is_digit(format[i])) spec.width = parse_int(format, i);
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = parse_int(format, i);
    }
    if (i >= format.size()) return invalid_argument_error("incomplete format");
    char type = format[i];
    if (!have_arg) {
      if (next >= positional.size()) {
        return invalid_argument_error("not enough arguments for format string");
      }
      arg = positional[next++];
    }
    if (spec.zero && spec.align == '>' && type != 's' && type != 'r') {
      spec.fill = '0';
      spec.align = '=';
    }
    std::string body;
    if (type == 's' || type == 'r' || type == 'a') {
      body = type == 's' ? py_str(arg) : py_repr(arg);
      if (spec.precision >= 0)
        body = body.substr(
            0, codepoint_offsets(body)[std::min<size_t>(spec.precision, codepoint_count(body))]);
    } else if (type == 'c') {
      if (arg.is_string()) {
        body = arg.as_string();
      } else {
        append_utf8(body, static_cast<char32_t>(arg.as_int()));
      }
    } else {
      if (!arg.is_number()) {
        return invalid_argument_error("%{} format: a real number is required, not {}", type,
                                      arg.type_name());
      }
      spec.type = type == 'i' || type == 'u' ? 'd' : type;
      int saved_width = spec.width;
      spec.width = -1;
      HEARTH_ASSIGN_OR_RETURN(body, format_number(arg, spec));
      spec.width = saved_width;
    }
    out += pad(std::move(body), spec, '>');
  }
  if (!mapping && next < positional.size()) {
    return invalid_argument_error("not all arguments converted during string formatting");
  }
  return out;
}

Result<std::string> brace_format(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return invalid_argument_error("Single '}}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string::npos) {
      return invalid_argument_error("Single '{{' encountered in format string");
    }
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec_text;
    char conversion = '\0';
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec_text = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : '\0';
      field.resize(bang);
    }
    Value arg;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) {
        return invalid_argument_error("Replacement index {} out of range", auto_index);
      }
      arg = args.positional[auto_index++];
    } else if (is_digit(field[0])) {
      size_t k = 0;
      size_t index = parse_int(field, k);
      if (index >= args.positional.size()) {
        return invalid_argument_error("Replacement index {} out of range", index);
      }
      arg = args.positional[index];
    } else {
      bool found = false;
      for (const auto& [name, value] : args.keyword) {
        if (name == field) {
          arg = value;
          found = true;
        }
      }
      if (!found) return invalid_argument_error("KeyError: '{}'", field);
    }
    if (conversion == 'r' || conversion == 'a') arg = Value::string(py_repr(arg));
    if (conversion == 's') arg = Value::string(py_str(arg));
    HEARTH_ASSIGN_OR_RETURN(Spec spec, parse_spec(spec_text));
    HEARTH_ASSIGN_OR_RETURN(std::string piece, format_with_spec(arg, spec));
    out += piece;
  }
  return out;
}

}  // namespace hearth::text::jinja
