// Body pre-checks (UTF-8, depth) and FieldReader.
#include "server/json_body.h"

#include <fmt/format.h>
#include <cmath>

#include "text/utf8.h"

namespace hearth::server {

using nlohmann::json;

namespace {

// Maximum nesting of arrays/objects, scanning outside strings. Stops early past `limit`.
int max_depth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

// "Invalid 'field': number below minimum value. Expected a value >= min, but got x instead." and
// its siblings (integer / above maximum), as OpenAI words them.
template <typename Limit, typename Got>
[[noreturn]] void throw_out_of_range(const std::string& field, const char* kind, bool below,
                                     Limit limit, Got got) {
  throw_invalid(
      fmt::format("Invalid '{}': {} {} value. Expected a value {} {}, but got {} instead.", field,
                  kind, below ? "below minimum" : "above maximum", below ? ">=" : "<=", limit, got),
      field);
}

}  // namespace

json parse_json_body(std::string_view body) {
  if (body.empty()) throw_invalid("request body is empty; expected a JSON object");
  if (std::size_t bad = text::find_invalid_utf8(body); bad != std::string_view::npos) {
    throw_invalid(fmt::format("request body is not valid UTF-8 (byte offset {})", bad));
  }
  if (max_depth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    throw_invalid(fmt::format("request body nests JSON deeper than {} levels", kMaxJsonDepth));
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    std::string what = e.what();
    // nlohmann prefixes "[json.exception.parse_error.101] "; keep the useful part.
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw_invalid("request body is not valid JSON: " + what);
  }
  if (!j.is_object()) {
    throw_invalid("request body must be a JSON object, got " + json_type_name(j));
  }
  return j;
}

std::string json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a decimal";
    default:
      return "an unknown value";
  }
}

FieldReader::FieldReader(const json& object, std::string prefix)
    : object_(object), prefix_(std::move(prefix)) {}

const json* FieldReader::get(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool FieldReader::has(std::string_view key) const { return get(key) != nullptr; }

void FieldReader::type_error(std::string_view key, std::string_view expected) const {
  const json* v = get(key);
  throw_invalid(fmt::format("Invalid type for '{}': expected {}, but got {} instead.", name(key),
                            expected, v ? json_type_name(*v) : "null"),
                name(key));
}

std::optional<double> FieldReader::number(std::string_view key, double min, double max) const {
  const json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) type_error(key, "a number");
  double d = v->get<double>();
  if (!std::isfinite(d) || d < min) {
    throw_out_of_range(name(key), "number", true, min, d);
  }
  if (d > max) {
    throw_out_of_range(name(key), "number", false, max, d);
  }
  return d;
}

std::optional<int64_t> FieldReader::integer(std::string_view key, int64_t min, int64_t max) const {
  const json* v = get(key);
  if (!v) return std::nullopt;
  bool integral = v->is_number_integer() || v->is_number_unsigned() ||
                  (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                   std::fabs(v->get<double>()) < 9e15);
  if (!integral) type_error(key, "an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max)) {
    throw_out_of_range(name(key), "integer", false, max, v->get<uint64_t>());
  }
  int64_t i = v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
  if (i < min) {
    throw_out_of_range(name(key), "integer", true, min, i);
  }
  if (i > max) {
    throw_out_of_range(name(key), "integer", false, max, i);
  }
  return i;
}

std::optional<bool> FieldReader::boolean(std::string_view key) const {
  const json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) type_error(key, "a boolean");
  return v->get<bool>();
}

std::optional<std::string> FieldReader::string(std::string_view key) const {
  const json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) type_error(key, "a string");
  return v->get<std::string>();
}

const json* FieldReader::array(std::string_view key) const {
  const json* v = get(key);
  if (v && !v->is_array()) type_error(key, "an array");
  return v;
}

const json* FieldReader::object(std::string_view key) const {
  const json* v = get(key);
  if (v && !v->is_object()) type_error(key, "an object");
  return v;
}

}  // namespace hearth::server
