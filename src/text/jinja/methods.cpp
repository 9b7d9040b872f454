// Bound methods of str, dict and list values.
#include "text/jinja/methods.h"

#include <fmt/format.h>

#include <algorithm>

#include "text/jinja/py_format.h"
#include "text/jinja/string_format.h"
#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

using Method = Result<Value> (*)(const Value& self, CallArgs& args);

Result<const std::string*> optional_string(const Value& v, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return static_cast<const std::string*>(nullptr);
  if (!v.is_string()) {
    return invalid_argument_error("{} arg must be None or str", what);
  }
  return &v.as_string();
}

Result<Value> strip_impl(const Value& self, CallArgs& args, const char* name, bool l, bool r) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind(name, {"chars"}));
  HEARTH_ASSIGN_OR_RETURN(const std::string* chars, optional_string(bound[0], name));
  return Value::string(py_strip(self.as_string(), chars, l, r));
}

// str.split()/rsplit() with no separator: runs of whitespace separate words; once maxsplit
// words are cut, the rest (minus the whitespace next to the cut) is the last part.
std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<size_t> off = codepoint_offsets(s);
  size_t n = off.size() - 1;
  auto space_at = [&](size_t k) {
    size_t i = off[k];
    return is_py_space(decode_utf8(s, i));
  };
  auto bytes = [&](size_t a, size_t b) { return std::string(s.substr(off[a], off[b] - off[a])); };
  std::vector<std::string> out;
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && space_at(i)) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(bytes(i, n));
        break;
      }
      size_t start = i;
      while (i < n && !space_at(i)) ++i;
      out.push_back(bytes(start, i));
    }
    return out;
  }
  size_t i = n;
  while (true) {
    while (i > 0 && space_at(i - 1)) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(bytes(0, i));
      break;
    }
    size_t end = i;
    while (i > 0 && !space_at(i - 1)) --i;
    out.push_back(bytes(i, end));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Result<Value> split_impl(const Value& self, CallArgs& args, bool from_right) {
  const char* name = from_right ? "rsplit" : "split";
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind(name, {"sep", "maxsplit"}));
  HEARTH_ASSIGN_OR_RETURN(const std::string* sep, optional_string(bound[0], "sep"));
  int64_t maxsplit = bound[1].is_number() ? bound[1].as_int() : -1;
  const std::string& s = self.as_string();
  std::vector<std::string> parts;
  if (sep == nullptr) {
    parts = split_whitespace(s, maxsplit, from_right);
  } else {
    if (sep->empty()) return invalid_argument_error("empty separator");
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t p = s.find(*sep, start);
        if (p == std::string::npos) break;
        parts.push_back(s.substr(start, p - start));
        start = p + sep->size();
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t p = s.rfind(*sep, end - sep->size());
        if (p == std::string::npos) break;
        rev.push_back(s.substr(p + sep->size(), end - p - sep->size()));
        end = p;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  std::vector<Value> out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

Result<Value> affix_impl(const Value& self, CallArgs& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind(name, {"affix", "start", "end"}, 1));
  std::vector<Value> options =
      bound[0].is_tuple() ? bound[0].items() : std::vector<Value>{bound[0]};
  std::string s = self.as_string();
  if (bound[1].is_number() || bound[2].is_number()) {
    std::vector<size_t> offsets = codepoint_offsets(s);
    int64_t n = static_cast<int64_t>(offsets.size()) - 1;
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
    int64_t a = bound[1].is_number() ? clamp(bound[1].as_int()) : 0;
    int64_t b = bound[2].is_number() ? clamp(bound[2].as_int()) : n;
    s = a < b ? s.substr(offsets[a], offsets[b] - offsets[a]) : "";
  }
  for (const Value& o : options) {
    if (!o.is_string()) {
      return invalid_argument_error("{} first arg must be str or a tuple of str, not {}", name,
                                    o.type_name());
    }
    const std::string& a = o.as_string();
    if (a.size() <= s.size() && (prefix ? s.compare(0, a.size(), a) == 0
                                        : s.compare(s.size() - a.size(), a.size(), a) == 0)) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

Result<Value> str_replace(const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind("replace", {"old", "new", "count"}, 2));
  if (!bound[0].is_string() || !bound[1].is_string()) {
    return invalid_argument_error("replace() arguments must be str");
  }
  const std::string& s = self.as_string();
  const std::string& from = bound[0].as_string();
  const std::string& to = bound[1].as_string();
  int64_t count = bound[2].is_number() ? bound[2].as_int() : -1;
  return Value::string(py_replace(s, from, to, count));
}

Result<Value> find_impl(const Value& self, CallArgs& args, const char* name, bool reverse,
                        bool raise) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind(name, {"sub"}, 1));
  if (!bound[0].is_string())
    return invalid_argument_error("must be str, not {}", bound[0].type_name());
  const std::string& s = self.as_string();
  size_t p = reverse ? s.rfind(bound[0].as_string()) : s.find(bound[0].as_string());
  if (p == std::string::npos) {
    if (raise) return invalid_argument_error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(codepoint_count(std::string_view(s).substr(0, p))));
}

Result<Value> str_count(const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind("count", {"sub"}, 1));
  if (!bound[0].is_string())
    return invalid_argument_error("must be str, not {}", bound[0].type_name());
  const std::string& s = self.as_string();
  const std::string& sub = bound[0].as_string();
  if (sub.empty()) return Value::integer(static_cast<int64_t>(codepoint_count(s) + 1));
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}

Result<Value> str_join(const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind("join", {"iterable"}, 1));
  std::vector<Value> items;
  if (bound[0].is_list()) {
    items = bound[0].items();
  } else if (bound[0].is_dict()) {
    for (const auto& [k, v] : bound[0].dict_data().entries) items.push_back(k);
  } else {
    return invalid_argument_error("can only join an iterable");
  }
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return invalid_argument_error("sequence item {}: expected str instance, {} found", i,
                                    items[i].type_name());
    }
    if (i > 0) out += self.as_string();
    out += items[i].as_string();
  }
  return Value::string(std::move(out));
}

template <bool (*Pred)(char32_t)>
Result<Value> all_chars(const Value& self, CallArgs&) {
  const std::string& s = self.as_string();
  if (s.empty()) return Value::boolean(false);
  for (size_t i = 0; i < s.size();) {
    if (!Pred(decode_utf8(s, i))) return Value::boolean(false);
  }
  return Value::boolean(true);
}

bool is_alnum(char32_t cp) { return is_py_alpha(cp) || is_py_digit(cp); }

Result<Value> case_check(const Value& self, bool want_upper) {
  const std::string& s = self.as_string();
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = decode_utf8(s, i);
    if (want_upper ? is_py_cased_lower(cp) : is_py_cased_upper(cp)) return Value::boolean(false);
    cased = cased || (want_upper ? is_py_cased_upper(cp) : is_py_cased_lower(cp));
  }
  return Value::boolean(cased);
}

Result<Value> justify(const Value& self, CallArgs& args, const char* name, char align) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind(name, {"width", "fillchar"}, 1));
  if (!bound[0].is_int()) return invalid_argument_error("{}() width must be int", name);
  std::string fill = bound[1].is_string() ? bound[1].as_string() : " ";
  const std::string& s = self.as_string();
  int64_t len = static_cast<int64_t>(codepoint_count(s));
  int64_t n = bound[0].as_int() - len;
  if (n <= 0) return self;
  auto repeat = [&](int64_t k) {
    std::string r;
    for (int64_t i = 0; i < k; ++i) r += fill;
    return r;
  };
  if (align == '<') return Value::string(s + repeat(n));
  if (align == '>') return Value::string(repeat(n) + s);
  // CPython centers with the extra fill on the right unless both lengths are odd.
  int64_t left = n / 2 + (n & bound[0].as_int() & 1);
  return Value::string(repeat(left) + s + repeat(n - left));
}

Result<Value> partition_impl(const Value& self, CallArgs& args, bool reverse) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind(reverse ? "rpartition" : "partition", {"sep"}, 1));
  if (!bound[0].is_string()) return invalid_argument_error("must be str");
  const std::string& s = self.as_string();
  const std::string& sep = bound[0].as_string();
  if (sep.empty()) return invalid_argument_error("empty separator");
  size_t p = reverse ? s.rfind(sep) : s.find(sep);
  if (p == std::string::npos) {
    return reverse ? Value::tuple({Value::string(""), Value::string(""), self})
                   : Value::tuple({self, Value::string(""), Value::string("")});
  }
  return Value::tuple(
      {Value::string(s.substr(0, p)), bound[0], Value::string(s.substr(p + sep.size()))});
}

std::optional<Method> string_method(const std::string& name) {
  static constexpr std::pair<std::string_view, Method> kMethods[] = {
      {"strip", [](const Value& s, CallArgs& a) { return strip_impl(s, a, "strip", true, true); }},
      {"lstrip",
       [](const Value& s, CallArgs& a) { return strip_impl(s, a, "lstrip", true, false); }},
      {"rstrip",
       [](const Value& s, CallArgs& a) { return strip_impl(s, a, "rstrip", false, true); }},
      {"split", [](const Value& s, CallArgs& a) { return split_impl(s, a, false); }},
      {"rsplit", [](const Value& s, CallArgs& a) { return split_impl(s, a, true); }},
      {"startswith", [](const Value& s, CallArgs& a) { return affix_impl(s, a, true); }},
      {"endswith", [](const Value& s, CallArgs& a) { return affix_impl(s, a, false); }},
      {"replace", str_replace},
      {"upper",
       [](const Value& s, CallArgs&) -> Result<Value> {
         return Value::string(py_upper(s.as_string()));
       }},
      {"lower",
       [](const Value& s, CallArgs&) -> Result<Value> {
         return Value::string(py_lower(s.as_string()));
       }},
      {"title",
       [](const Value& s, CallArgs&) -> Result<Value> {
         return Value::string(py_title(s.as_string()));
       }},
      {"capitalize",
       [](const Value& s, CallArgs&) -> Result<Value> {
         return Value::string(py_capitalize(s.as_string()));
       }},
      {"find", [](const Value& s, CallArgs& a) { return find_impl(s, a, "find", false, false); }},
      {"rfind", [](const Value& s, CallArgs& a) { return find_impl(s, a, "rfind", true, false); }},
      {"index", [](const Value& s, CallArgs& a) { return find_impl(s, a, "index", false, true); }},
      {"rindex", [](const Value& s, CallArgs& a) { return find_impl(s, a, "rindex", true, true); }},
      {"count", str_count},
      {"join", str_join},
      {"format",
       [](const Value& s, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(std::string out, brace_format(s.as_string(), a));
         return Value::string(std::move(out));
       }},
      {"isdigit", all_chars<is_py_digit>},
      {"isalpha", all_chars<is_py_alpha>},
      {"isalnum", all_chars<is_alnum>},
      {"isspace", all_chars<is_py_space>},
      {"isupper", [](const Value& s, CallArgs&) { return case_check(s, true); }},
      {"islower", [](const Value& s, CallArgs&) { return case_check(s, false); }},
      {"center", [](const Value& s, CallArgs& a) { return justify(s, a, "center", '^'); }},
      {"ljust", [](const Value& s, CallArgs& a) { return justify(s, a, "ljust", '<'); }},
      {"rjust", [](const Value& s, CallArgs& a) { return justify(s, a, "rjust", '>'); }},
      {"partition", [](const Value& s, CallArgs& a) { return partition_impl(s, a, false); }},
      {"rpartition", [](const Value& s, CallArgs& a) { return partition_impl(s, a, true); }},
      {"removeprefix",
       [](const Value& s, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("removeprefix", {"prefix"}, 1));
         if (!b[0].is_string())
           return invalid_argument_error("removeprefix() argument must be str");
         const std::string& str = s.as_string();
         const std::string& p = b[0].as_string();
         return Value::string(str.rfind(p, 0) == 0 ? str.substr(p.size()) : str);
       }},
      {"removesuffix",
       [](const Value& s, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("removesuffix", {"suffix"}, 1));
         if (!b[0].is_string())
           return invalid_argument_error("removesuffix() argument must be str");
         const std::string& str = s.as_string();
         const std::string& p = b[0].as_string();
         bool ends = !p.empty() && str.size() >= p.size() &&
                     str.compare(str.size() - p.size(), p.size(), p) == 0;
         return Value::string(ends ? str.substr(0, str.size() - p.size()) : str);
       }},
      {"splitlines",
       [](const Value& s, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("splitlines", {"keepends"}));
         bool keep = b[0].truthy();
         const std::string& str = s.as_string();
         std::vector<Value> lines;
         size_t start = 0;
         for (size_t i = 0; i < str.size();) {
           size_t at = i;
           char32_t cp = decode_utf8(str, i);
           bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                      cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
           if (!brk) continue;
           if (cp == '\r' && i < str.size() && str[i] == '\n') ++i;
           lines.push_back(Value::string(str.substr(start, (keep ? i : at) - start)));
           start = i;
         }
         if (start < str.size()) lines.push_back(Value::string(str.substr(start)));
         return Value::list(std::move(lines));
       }},
  };
  for (const auto& [n, m] : kMethods) {
    if (n == name) return m;
  }
  return std::nullopt;
}

std::optional<Method> dict_method(const std::string& name) {
  static constexpr std::pair<std::string_view, Method> kMethods[] = {
      {"items",
       [](const Value& d, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("items", {}));
         std::vector<Value> out;
         for (const auto& [k, v] : d.dict_data().entries) out.push_back(Value::tuple({k, v}));
         return Value::list(std::move(out));
       }},
      {"keys",
       [](const Value& d, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("keys", {}));
         std::vector<Value> out;
         for (const auto& [k, v] : d.dict_data().entries) out.push_back(k);
         return Value::list(std::move(out));
       }},
      {"values",
       [](const Value& d, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("values", {}));
         std::vector<Value> out;
         for (const auto& [k, v] : d.dict_data().entries) out.push_back(v);
         return Value::list(std::move(out));
       }},
      {"get",
       [](const Value& d, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("get", {"key", "default"}, 1));
         if (const Value* v = d.dict_data().find(b[0])) return *v;
         return b[1].is_undefined() ? Value::none() : b[1];
       }},
      {"copy", [](const Value& d, CallArgs&) -> Result<Value> { return d; }},
  };
  for (const auto& [n, m] : kMethods) {
    if (n == name) return m;
  }
  return std::nullopt;
}

std::optional<Method> list_method(const std::string& name) {
  static constexpr std::pair<std::string_view, Method> kMethods[] = {
      {"index",
       [](const Value& l, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("index", {"value"}, 1));
         const auto& items = l.items();
         for (size_t i = 0; i < items.size(); ++i) {
           if (values_equal(items[i], b[0])) return Value::integer(static_cast<int64_t>(i));
         }
         return invalid_argument_error("{} is not in list", py_repr(b[0]));
       }},
      {"count",
       [](const Value& l, CallArgs& a) -> Result<Value> {
         HEARTH_ASSIGN_OR_RETURN(auto b, a.bind("count", {"value"}, 1));
         int64_t n = 0;
         for (const Value& v : l.items()) n += values_equal(v, b[0]);
         return Value::integer(n);
       }},
      {"copy", [](const Value& l, CallArgs&) -> Result<Value> { return l; }},
  };
  for (const auto& [n, m] : kMethods) {
    if (n == name) return m;
  }
  return std::nullopt;
}

bool is_mutating(const Value& self, const std::string& name) {
  static constexpr std::string_view kList[] = {"append", "clear",  "extend",  "insert",
                                               "pop",    "remove", "reverse", "sort"};
  static constexpr std::string_view kDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
  if (self.is_list() && !self.is_tuple()) {
    return std::find(std::begin(kList), std::end(kList), name) != std::end(kList);
  }
  if (self.is_dict()) return std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
  return false;
}

}  // namespace

std::optional<Value> lookup_method(const Value& self, const std::string& name) {
  std::optional<Method> method;
  if (self.is_string()) {
    method = string_method(name);
  } else if (self.is_dict()) {
    method = dict_method(name);
  } else if (self.is_list()) {
    method = list_method(name);
  }
  if (method) {
    Method m = *method;
    Value bound_self = self;
    return Value::callable(
        name, [m, bound_self](Interpreter&, CallArgs& args) { return m(bound_self, args); });
  }
  if (is_mutating(self, name)) {
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, self.type_name()));
  }
  return std::nullopt;
}

}  // namespace hearth::text::jinja
