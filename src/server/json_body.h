// Untrusted request bodies: checked for UTF-8 and nesting depth before the JSON parser
// sees them, then read field by field with typed accessors whose errors name the field
// and say what was expected, in the words OpenAI's own API uses.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace hearth::server {

inline constexpr int kMaxJsonDepth = 64;

// Parses a body that must be a JSON object. Throws ApiException on invalid UTF-8, nesting
// deeper than kMaxJsonDepth, malformed JSON or a non-object top level.
nlohmann::json parse_json_body(std::string_view body);

// Typed reads of one JSON object's fields. `prefix` names the object in messages
// ("messages[2]."); every miss or mismatch throws ApiException naming prefix + key.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& object, std::string prefix = "");

  bool has(std::string_view key) const;                   // present and not null
  const nlohmann::json* get(std::string_view key) const;  // null when absent or null

  std::optional<double> number(std::string_view key, double min, double max) const;
  std::optional<int64_t> integer(std::string_view key, int64_t min, int64_t max) const;
  std::optional<bool> boolean(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;
  const nlohmann::json* array(std::string_view key) const;
  const nlohmann::json* object(std::string_view key) const;

  std::string name(std::string_view key) const { return prefix_ + std::string(key); }
  [[noreturn]] void type_error(std::string_view key, std::string_view expected) const;

 private:
  const nlohmann::json& object_;
  std::string prefix_;
};

// "a string", "an array", ... for messages.
std::string json_type_name(const nlohmann::json& value);

}  // namespace hearth::server
