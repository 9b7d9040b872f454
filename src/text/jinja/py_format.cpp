// Python's str()/repr() of Jinja values.
#include "text/jinja/py_format.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

// CPython's str.isprintable() for one code point.
bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

void append_container(std::string& out, const Value& v) {
  if (v.is_list()) {
    const auto& items = v.items();
    out += v.is_tuple() ? '(' : '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      out += py_repr(items[i]);
    }
    if (v.is_tuple() && items.size() == 1) out += ',';
    out += v.is_tuple() ? ')' : ']';
    return;
  }
  out += '{';
  bool first = true;
  for (const auto& [k, val] : v.dict_data().entries) {
    if (!first) out += ", ";
    first = false;
    out += py_repr(k);
    out += ": ";
    out += py_repr(val);
  }
  out += '}';
}

}  // namespace

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+02"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out;
  if (negative) out.push_back('-');
  if (exponent >= -4 && exponent < 16) {
    int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-point), '0');
      out.append(digits);
    } else if (point >= static_cast<int>(digits.size())) {
      out.append(digits);
      out.append(point - digits.size(), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, point);
      out.push_back('.');
      out.append(digits, point, std::string::npos);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  out.append(fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent)));
  return out;
}

std::string py_string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t cp = decode_utf8(s, i);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x7F && cp >= 0x20) {
      out += static_cast<char>(cp);
    } else if (!is_printable(cp)) {
      if (cp < 0x100) {
        out += fmt::format("\\x{:02x}", static_cast<uint32_t>(cp));
      } else if (cp < 0x10000) {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      } else {
        out += fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
      }
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += quote;
  return out;
}

std::string py_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.as_string();
    default:
      return py_repr(v);
  }
}

std::string py_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return py_float_repr(v.as_double());
    case Value::Kind::kString:
      return py_string_repr(v.as_string());
    case Value::Kind::kList:
    case Value::Kind::kDict: {
      std::string out;
      append_container(out, v);
      return out;
    }
    case Value::Kind::kObject: {
      const auto& obj = *v.object_data();
      std::string attrs;
      append_container(attrs, Value::dict(obj.attrs));
      return fmt::format("<{} {}>", obj.type_name, attrs);
    }
    case Value::Kind::kCallable:
      return fmt::format("<function {}>", v.callable_data().name);
  }
  return "";
}

}  // namespace hearth::text::jinja
