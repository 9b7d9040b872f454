// A string -> id hash map with string_view lookups (no temporary std::string per lookup).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace hearth::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace hearth::text
