// Jinja's builtin filters (jinja2/filters.py semantics) and transformers' tojson override.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "text/jinja/builtins.h"
#include "text/jinja/json_dumps.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_format.h"
#include "text/jinja/string_format.h"
#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

Value str_value(std::string s) { return Value::string(std::move(s)); }

Result<int64_t> length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(codepoint_count(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict_data().entries.size());
    default:
      return invalid_argument_error("object of type '{}' has no len()", v.type_name());
  }
}

// The sort key Jinja builds: the attribute (if any), lower-cased when not case sensitive.
Result<Value> sort_key(Interpreter& in, const Value& v, const Value& attribute,
                       bool case_sensitive) {
  Value key = v;
  if (!attribute.is_undefined() && !attribute.is_none()) {
    HEARTH_ASSIGN_OR_RETURN(key, get_attribute_path(in, v, attribute));
  }
  if (!case_sensitive && key.is_string()) key = Value::string(py_lower(key.as_string()));
  return key;
}

Result<std::vector<Value>> sorted_values(Interpreter& in, std::vector<Value> items,
                                         const Value& attribute, bool case_sensitive,
                                         bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) {
    HEARTH_ASSIGN_OR_RETURN(Value k, sort_key(in, v, attribute, case_sensitive));
    keyed.emplace_back(std::move(k), std::move(v));
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto lt = reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
    if (!lt.ok()) {
      if (error.ok()) error = lt.status();
      return false;
    }
    return *lt;
  });
  HEARTH_RETURN_IF_ERROR(error);
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

Result<Value> filter_tojson(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(
      auto b, args.bind("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  options.ensure_ascii = b[0].truthy();
  if (b[1].is_int() || b[1].is_bool()) {
    options.indent = std::string(std::max<int64_t>(0, b[1].as_int()), ' ');
  } else if (b[1].is_string()) {
    options.indent = b[1].as_string();
  } else if (!b[1].is_undefined() && !b[1].is_none()) {
    return invalid_argument_error("tojson: indent must be an int or a string");
  }
  if (!b[2].is_undefined() && !b[2].is_none()) {
    if (!b[2].is_list() || b[2].items().size() != 2 || !b[2].items()[0].is_string() ||
        !b[2].items()[1].is_string()) {
      return invalid_argument_error("tojson: separators must be a pair of strings");
    }
    options.item_separator = b[2].items()[0].as_string();
    options.key_separator = b[2].items()[1].as_string();
  }
  options.sort_keys = b[3].truthy();
  HEARTH_ASSIGN_OR_RETURN(std::string s, json_dumps(v, options));
  return str_value(std::move(s));
}

Result<Value> filter_default(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("default", {"default_value", "boolean"}));
  Value fallback = b[0].is_undefined() ? Value::string("") : b[0];
  if (v.is_undefined() || (b[1].truthy() && !v.truthy())) return fallback;
  return v;
}

Result<Value> filter_join(Interpreter& in, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("join", {"d", "attribute"}));
  std::string sep = b[0].is_undefined() ? "" : py_str(b[0]);
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!b[1].is_undefined() && !b[1].is_none()) {
      HEARTH_ASSIGN_OR_RETURN(item, get_attribute_path(in, item, b[1]));
    }
    if (i > 0) out += sep;
    out += py_str(item);
    if (out.size() > in.limits().max_output_bytes) {
      return out_of_range_error("join result exceeds the output limit");
    }
  }
  return str_value(std::move(out));
}

Result<Value> filter_first_last(Interpreter& in, const Value& v, bool first) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  if (items.empty()) {
    return Value::undefined(first ? "No first item, sequence was empty."
                                  : "No last item, sequence was empty.");
  }
  return first ? items.front() : items.back();
}

// Python int(x) for the `int` filter, falling back through float as Jinja does.
std::optional<int64_t> parse_int(const std::string& text, int base) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() &&
        std::isalnum(static_cast<unsigned char>(s[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    digits += s[i];
  }
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long r = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || end != digits.c_str() + digits.size()) return std::nullopt;
  return r;
}

std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, nullptr, true, true);
  if (s.empty()) return std::nullopt;
  std::string lower = py_lower(s);
  if (lower == "inf" || lower == "+inf" || lower == "infinity" || lower == "+infinity") {
    return INFINITY;
  }
  if (lower == "-inf" || lower == "-infinity") return -INFINITY;
  if (lower == "nan" || lower == "+nan" || lower == "-nan") return NAN;
  for (char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-' || c == '_')) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

Result<Value> filter_int(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("int", {"default", "base"}));
  Value fallback = b[0].is_undefined() ? Value::integer(0) : b[0];
  int base = b[1].is_int() ? static_cast<int>(b[1].as_int()) : 10;
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d)) return fallback;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value::integer(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d)) {
      return Value::integer(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

Result<Value> filter_float(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("float", {"default"}));
  Value fallback = b[0].is_undefined() ? Value::floating(0.0) : b[0];
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::floating(*d);
  }
  return fallback;
}

Result<Value> filter_indent(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("indent", {"width", "first", "blank"}));
  std::string indention = b[0].is_string() ? b[0].as_string()
                          : b[0].is_undefined()
                              ? std::string(4, ' ')
                              : std::string(std::max<int64_t>(0, b[0].as_int()), ' ');
  std::string s = py_str(v) + "\n";
  // str.splitlines() on the text plus the newline Jinja appends.
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    char32_t cp = decode_utf8(s, i);
    bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
               cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    lines.push_back(s.substr(start, at - start));
    start = i;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  std::string rv;
  if (b[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (b[1].truthy()) rv = indention + rv;
  return str_value(std::move(rv));
}

Result<Value> filter_round(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("round", {"precision", "method"}));
  int64_t precision = b[0].is_undefined() ? 0 : b[0].as_int();
  std::string method = b[1].is_string() ? b[1].as_string() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return invalid_argument_error("method must be common, ceil or floor");
  }
  if (!v.is_number()) return invalid_argument_error("round: '{}' is not a number", v.type_name());
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.as_int());
    double d = v.as_double();
    if (!std::isfinite(d)) return Value::floating(d);
    if (precision >= 0) {
      std::string s = fmt::format("{:.{}f}", d, precision);
      return Value::floating(std::strtod(s.c_str(), nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::floating(std::nearbyint(d / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  x = method == "ceil" ? std::ceil(x) : std::floor(x);
  return Value::floating(x / scale);
}

Result<Value> filter_replace(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("replace", {"old", "new", "count"}, 2));
  std::string s = py_str(v);
  std::string from = py_str(b[0]), to = py_str(b[1]);
  int64_t count = b[2].is_number() ? b[2].as_int() : -1;
  return str_value(py_replace(s, from, to, count));
}

// select / reject / selectattr / rejectattr share Jinja's select_or_reject.
Result<Value> select_or_reject(Interpreter& in, const Value& v, CallArgs& args, bool with_attr,
                               bool select) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  size_t next = 0;
  Value attribute;
  if (with_attr) {
    if (args.positional.empty())
      return invalid_argument_error("Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  std::string test_name;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string())
      return invalid_argument_error("test name must be a string");
    test_name = args.positional[next++].as_string();
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + next, args.positional.end());
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    HEARTH_RETURN_IF_ERROR(in.charge(1));
    Value subject = item;
    if (with_attr) {
      HEARTH_ASSIGN_OR_RETURN(subject, get_attribute_path(in, item, attribute));
    }
    bool passed;
    if (test_name.empty()) {
      passed = subject.truthy();
    } else {
      CallArgs a = test_args;
      HEARTH_ASSIGN_OR_RETURN(passed, in.apply_test(test_name, subject, a));
    }
    if (passed == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> filter_map(Interpreter& in, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  std::vector<Value> out;
  if (args.positional.empty()) {
    Value attribute, fallback;
    bool has_default = false;
    for (const auto& [k, val] : args.keyword) {
      if (k == "attribute") {
        attribute = val;
      } else if (k == "default") {
        fallback = val;
        has_default = true;
      } else {
        return invalid_argument_error("Unexpected keyword argument '{}'", k);
      }
    }
    if (attribute.is_undefined()) return invalid_argument_error("map requires a filter argument");
    for (const Value& item : items) {
      HEARTH_RETURN_IF_ERROR(in.charge(1));
      HEARTH_ASSIGN_OR_RETURN(Value x, get_attribute_path(in, item, attribute));
      out.push_back(x.is_undefined() && has_default ? fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (!args.positional[0].is_string())
    return invalid_argument_error("map: filter name must be a string");
  std::string name = args.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    HEARTH_RETURN_IF_ERROR(in.charge(1));
    CallArgs a = rest;
    HEARTH_ASSIGN_OR_RETURN(Value x, in.apply_filter(name, item, a));
    out.push_back(std::move(x));
  }
  return Value::list(std::move(out));
}

Result<Value> filter_min_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max) {
  HEARTH_ASSIGN_OR_RETURN(auto b,
                          args.bind(want_max ? "max" : "min", {"case_sensitive", "attribute"}));
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  HEARTH_ASSIGN_OR_RETURN(Value best_key, sort_key(in, items[0], b[1], b[0].truthy()));
  for (size_t i = 1; i < items.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value k, sort_key(in, items[i], b[1], b[0].truthy()));
    HEARTH_ASSIGN_OR_RETURN(bool better,
                            want_max ? less_than(best_key, k) : less_than(k, best_key));
    if (better) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Result<Value> filter_sum(Interpreter& in, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("sum", {"attribute", "start"}));
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  Value total = b[1].is_undefined() ? Value::integer(0) : b[1];
  for (const Value& item : items) {
    Value x = item;
    if (!b[0].is_undefined() && !b[0].is_none()) {
      HEARTH_ASSIGN_OR_RETURN(x, get_attribute_path(in, item, b[0]));
    }
    HEARTH_ASSIGN_OR_RETURN(total, binary_op("+", total, x, in.limits().max_output_bytes));
  }
  return total;
}

Result<Value> filter_unique(Interpreter& in, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("unique", {"case_sensitive", "attribute"}));
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    HEARTH_ASSIGN_OR_RETURN(Value key, sort_key(in, item, b[1], b[0].truthy()));
    bool dup = false;
    for (const Value& s : seen) dup = dup || values_equal(s, key);
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> filter_dictsort(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("dictsort", {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return invalid_argument_error("dictsort: expected a mapping");
  std::string by = b[1].is_string() ? b[1].as_string() : "key";
  if (by != "key" && by != "value") {
    return invalid_argument_error("You can only sort by either \"key\" or \"value\"");
  }
  int pos = by == "key" ? 0 : 1;
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.dict_data().entries) pairs.push_back(Value::tuple({k, val}));
  Status error;
  bool case_sensitive = b[0].truthy();
  bool reverse = b[2].truthy();
  auto key = [&](const Value& pair) {
    Value k = pair.items()[pos];
    if (!case_sensitive && k.is_string()) k = Value::string(py_lower(k.as_string()));
    return k;
  };
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& c) {
    auto lt = reverse ? less_than(key(c), key(a)) : less_than(key(a), key(c));
    if (!lt.ok()) {
      if (error.ok()) error = lt.status();
      return false;
    }
    return *lt;
  });
  HEARTH_RETURN_IF_ERROR(error);
  return Value::list(std::move(pairs));
}

Result<Value> filter_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) return invalid_argument_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict_data().entries) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Result<Value> filter_batch(Interpreter& in, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("batch", {"linecount", "fill_with"}, 1));
  if (!b[0].is_int() || b[0].as_int() <= 0)
    return invalid_argument_error("batch: linecount must be positive");
  size_t n = static_cast<size_t>(b[0].as_int());
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  std::vector<Value> out, row;
  for (const Value& item : items) {
    row.push_back(item);
    if (row.size() == n) {
      out.push_back(Value::list(std::move(row)));
      row.clear();
    }
  }
  if (!row.empty()) {
    if (!b[1].is_undefined() && !b[1].is_none()) {
      while (row.size() < n) row.push_back(b[1]);
    }
    out.push_back(Value::list(std::move(row)));
  }
  return Value::list(std::move(out));
}

Result<Value> filter_title(Interpreter&, const Value& v, CallArgs&) {
  // Jinja splits on runs of [-\s({\[<] and capitalizes each piece.
  std::string s = py_str(v);
  auto is_sep = [](char32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_py_space(cp);
  };
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    size_t j = i;
    bool sep = is_sep(decode_utf8(s, j));
    while (i < s.size()) {
      size_t k = i;
      if (is_sep(decode_utf8(s, k)) != sep) break;
      i = k;
    }
    std::string piece = s.substr(start, i - start);
    size_t first_end = 0;
    decode_utf8(piece, first_end);
    out += py_upper(piece.substr(0, first_end)) + py_lower(piece.substr(first_end));
  }
  return str_value(std::move(out));
}

Result<Value> filter_wordcount(Interpreter&, const Value& v, CallArgs&) {
  std::string s = py_str(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = decode_utf8(s, i);
    bool w = cp == '_' || is_py_alpha(cp) || is_py_digit(cp);
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value::integer(words);
}

Result<Value> filter_escape(Interpreter&, const Value& v, CallArgs&) {
  std::string s = py_str(v), out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return str_value(std::move(out));
}

FilterFn string_fn(std::string (*fn)(std::string_view)) {
  return [fn](Interpreter&, const Value& v, CallArgs&) -> Result<Value> {
    return Value::string(fn(py_str(v)));
  };
}

}  // namespace

Result<Value> get_attribute_path(Interpreter& in, const Value& v, const Value& attribute) {
  if (!attribute.is_string()) return in.get_item(v, attribute);
  Value cur = v;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
    HEARTH_ASSIGN_OR_RETURN(cur, in.get_item(cur, numeric ? Value::integer(std::atoll(part.c_str()))
                                                          : Value::string(part)));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

void register_filters(Environment& env) {
  auto& f = env.filters;
  f["tojson"] = filter_tojson;
  f["default"] = filter_default;
  f["d"] = filter_default;
  f["join"] = filter_join;
  f["first"] = [](Interpreter& in, const Value& v, CallArgs&) {
    return filter_first_last(in, v, true);
  };
  f["last"] = [](Interpreter& in, const Value& v, CallArgs&) {
    return filter_first_last(in, v, false);
  };
  f["length"] = [](Interpreter&, const Value& v, CallArgs&) -> Result<Value> {
    HEARTH_ASSIGN_OR_RETURN(int64_t n, length_of(v));
    return Value::integer(n);
  };
  f["count"] = f["length"];
  f["trim"] = [](Interpreter&, const Value& v, CallArgs& args) -> Result<Value> {
    HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("trim", {"chars"}));
    std::string chars = b[0].is_string() ? b[0].as_string() : "";
    return Value::string(py_strip(py_str(v), b[0].is_string() ? &chars : nullptr, true, true));
  };
  f["upper"] = string_fn(py_upper);
  f["lower"] = string_fn(py_lower);
  f["capitalize"] = string_fn(py_capitalize);
  f["title"] = filter_title;
  f["replace"] = filter_replace;
  f["string"] = [](Interpreter&, const Value& v, CallArgs&) -> Result<Value> {
    return Value::string(py_str(v));
  };
  f["safe"] = [](Interpreter&, const Value& v, CallArgs&) -> Result<Value> { return v; };
  f["escape"] = filter_escape;
  f["e"] = filter_escape;
  f["int"] = filter_int;
  f["float"] = filter_float;
  f["abs"] = [](Interpreter&, const Value& v, CallArgs&) -> Result<Value> {
    if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) {
      if (v.as_int() == INT64_MIN) return out_of_range_error("integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    }
    return invalid_argument_error("bad operand type for abs(): '{}'", v.type_name());
  };
  f["round"] = filter_round;
  f["list"] = [](Interpreter& in, const Value& v, CallArgs&) -> Result<Value> {
    HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
    return Value::list(std::move(items));
  };
  f["items"] = filter_items;
  f["dictsort"] = filter_dictsort;
  f["map"] = filter_map;
  f["select"] = [](Interpreter& in, const Value& v, CallArgs& a) {
    return select_or_reject(in, v, a, false, true);
  };
  f["reject"] = [](Interpreter& in, const Value& v, CallArgs& a) {
    return select_or_reject(in, v, a, false, false);
  };
  f["selectattr"] = [](Interpreter& in, const Value& v, CallArgs& a) {
    return select_or_reject(in, v, a, true, true);
  };
  f["rejectattr"] = [](Interpreter& in, const Value& v, CallArgs& a) {
    return select_or_reject(in, v, a, true, false);
  };
  f["unique"] = filter_unique;
  f["min"] = [](Interpreter& in, const Value& v, CallArgs& a) {
    return filter_min_max(in, v, a, false);
  };
  f["max"] = [](Interpreter& in, const Value& v, CallArgs& a) {
    return filter_min_max(in, v, a, true);
  };
  f["sum"] = filter_sum;
  f["sort"] = [](Interpreter& in, const Value& v, CallArgs& args) -> Result<Value> {
    HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("sort", {"reverse", "case_sensitive", "attribute"}));
    HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
    HEARTH_ASSIGN_OR_RETURN(
        items, sorted_values(in, std::move(items), b[2], b[1].truthy(), b[0].truthy()));
    return Value::list(std::move(items));
  };
  f["reverse"] = [](Interpreter& in, const Value& v, CallArgs&) -> Result<Value> {
    if (v.is_string()) {
      std::vector<size_t> off = codepoint_offsets(v.as_string());
      std::string out;
      for (size_t k = off.size() - 1; k > 0; --k)
        out += v.as_string().substr(off[k - 1], off[k] - off[k - 1]);
      return Value::string(std::move(out));
    }
    HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  };
  f["indent"] = filter_indent;
  f["center"] = [](Interpreter& in, const Value& v, CallArgs& args) -> Result<Value> {
    HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("center", {"width"}));
    CallArgs a;
    a.positional.push_back(b[0].is_undefined() ? Value::integer(80) : b[0]);
    Value s = Value::string(py_str(v));
    HEARTH_ASSIGN_OR_RETURN(Value method, in.get_attr(s, "center"));
    return in.call(method, a);
  };
  f["wordcount"] = filter_wordcount;
  f["batch"] = filter_batch;
  f["attr"] = [](Interpreter& in, const Value& v, CallArgs& args) -> Result<Value> {
    HEARTH_ASSIGN_OR_RETURN(auto b, args.bind("attr", {"name"}, 1));
    if (!b[0].is_string()) return invalid_argument_error("attr: name must be a string");
    return in.get_attr(v, b[0].as_string());
  };
  f["format"] = [](Interpreter&, const Value& v, CallArgs& args) -> Result<Value> {
    if (!args.positional.empty() && !args.keyword.empty()) {
      return invalid_argument_error(
          "can't handle positional and keyword arguments at the same time");
    }
    Value params;
    if (!args.keyword.empty()) {
      DictData d;
      for (const auto& [k, val] : args.keyword) d.set(Value::string(k), val);
      params = Value::dict(std::move(d));
    } else {
      params = Value::tuple(args.positional);
    }
    HEARTH_ASSIGN_OR_RETURN(std::string s, percent_format(py_str(v), params));
    return Value::string(std::move(s));
  };
}

}  // namespace hearth::text::jinja
