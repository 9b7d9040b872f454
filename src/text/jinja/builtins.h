// Registration of Jinja's builtin filters, tests and global functions into an Environment.
// Each group lives in its own file (filters.cpp, builtin_tests.cpp, globals.cpp).
#pragma once

#include <string>

#include "text/jinja/interpreter.h"

namespace hearth::text::jinja {

void register_filters(Environment& env);
void register_tests(Environment& env);
void register_globals(Environment& env);

// Jinja's make_attrgetter: "a.b.0" walks getitem per dotted part (digits index lists).
Result<Value> get_attribute_path(Interpreter& in, const Value& v, const Value& attribute);

}  // namespace hearth::text::jinja
