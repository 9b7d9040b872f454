// How Python prints values: str() and repr() as Jinja's output and `string` filter produce them
// (True, None, 1.0, "{'a': [1, 2]}"), including float repr's shortest round-trip digits.
#pragma once

#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace hearth::text::jinja {

// str(x); an Undefined prints as the empty string, as Jinja's default Undefined does.
std::string py_str(const Value& v);
// repr(x).
std::string py_repr(const Value& v);
// repr(float): "1.0", "0.1", "1e+16", "1.5e-05", "inf", "nan".
std::string py_float_repr(double d);
// repr(str): quotes and escapes chosen as CPython does.
std::string py_string_repr(std::string_view s);

}  // namespace hearth::text::jinja
