// json.dumps as CPython's encoder writes it.
#include "text/jinja/json_dumps.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "text/jinja/py_format.h"
#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

constexpr int kMaxDepth = 512;

void append_escaped(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t cp = decode_utf8(s, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
      if (cp >= 0x10000) {
        char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      }
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += '"';
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(d);
}

class Encoder {
 public:
  explicit Encoder(const JsonDumpOptions& options)
      : options_(options),
        item_sep_(options.item_separator.value_or(options.indent ? "," : ", ")) {}

  Status encode(const Value& v, int depth, std::string& out) {
    if (depth > kMaxDepth) return invalid_argument_error("tojson: nesting too deep");
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return ok_status();
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return ok_status();
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return ok_status();
      case Value::Kind::kFloat:
        out += float_json(v.as_double());
        return ok_status();
      case Value::Kind::kString:
        append_escaped(out, v.as_string(), options_.ensure_ascii);
        return ok_status();
      case Value::Kind::kList:
        return encode_list(v.items(), depth, out);
      case Value::Kind::kDict:
        return encode_dict(v.dict_data(), depth, out);
      default:
        return invalid_argument_error("Object of type {} is not JSON serializable", v.type_name());
    }
  }

 private:
  void newline(int depth, std::string& out) {
    out += '\n';
    for (int i = 0; i < depth; ++i) out += *options_.indent;
  }

  Status encode_list(const std::vector<Value>& items, int depth, std::string& out) {
    if (items.empty()) {
      out += "[]";
      return ok_status();
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep_;
      if (options_.indent) newline(depth + 1, out);
      HEARTH_RETURN_IF_ERROR(encode(items[i], depth + 1, out));
    }
    if (options_.indent) newline(depth, out);
    out += ']';
    return ok_status();
  }

  Status key_string(const Value& key, std::string& out) {
    switch (key.kind()) {
      case Value::Kind::kString:
        out = key.as_string();
        return ok_status();
      case Value::Kind::kNone:
        out = "null";
        return ok_status();
      case Value::Kind::kBool:
        out = key.as_bool() ? "true" : "false";
        return ok_status();
      case Value::Kind::kInt:
        out = std::to_string(key.as_int());
        return ok_status();
      case Value::Kind::kFloat:
        out = float_json(key.as_double());
        return ok_status();
      default:
        return invalid_argument_error("keys must be str, int, float, bool or None, not {}",
                                      key.type_name());
    }
  }

  Status encode_dict(const DictData& dict, int depth, std::string& out) {
    if (dict.entries.empty()) {
      out += "{}";
      return ok_status();
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : dict.entries) entries.push_back(&e);
    if (options_.sort_keys) {
      for (const auto* e : entries) {
        if (!e->first.is_string()) {
          return invalid_argument_error("tojson: sort_keys needs string keys, got {}",
                                        e->first.type_name());
        }
      }
      std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
        return a->first.as_string() < b->first.as_string();
      });
    }
    out += '{';
    bool first = true;
    for (const auto* e : entries) {
      if (!first) out += item_sep_;
      first = false;
      if (options_.indent) newline(depth + 1, out);
      std::string key;
      HEARTH_RETURN_IF_ERROR(key_string(e->first, key));
      append_escaped(out, key, options_.ensure_ascii);
      out += options_.key_separator;
      HEARTH_RETURN_IF_ERROR(encode(e->second, depth + 1, out));
    }
    if (options_.indent) newline(depth, out);
    out += '}';
    return ok_status();
  }

  const JsonDumpOptions& options_;
  std::string item_sep_;
};

}  // namespace

Result<std::string> json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  Encoder encoder(options);
  HEARTH_RETURN_IF_ERROR(encoder.encode(v, 0, out));
  return out;
}

}  // namespace hearth::text::jinja
