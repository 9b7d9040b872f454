// Python methods reachable from templates: str (strip, split, startswith, format, ...), dict
// (items, keys, values, get) and list (index, count). Methods that mutate a list or dict are
// what ImmutableSandboxedEnvironment forbids: they resolve to an Undefined that fails when called.
#pragma once

#include <optional>
#include <string>

#include "text/jinja/value.h"

namespace hearth::text::jinja {

// The bound method `self.name`, or nullopt when self has no such method.
std::optional<Value> lookup_method(const Value& self, const std::string& name);

}  // namespace hearth::text::jinja
