// Python semantics of Jinja's operators: arithmetic with int/float promotion, string and list
// concatenation and repetition, chained comparisons, `in`, and the TypeErrors Python raises.
#pragma once

#include <string_view>

#include "base/status.h"
#include "text/jinja/value.h"

namespace hearth::text::jinja {

// op: + - * / // % ** ~ ; max_len caps strings and lists built by + * ~.
Result<Value> binary_op(std::string_view op, const Value& a, const Value& b, size_t max_len);
// op: == != < > <= >= in notin
Result<bool> compare_op(std::string_view op, const Value& a, const Value& b);
// op: - +
Result<Value> unary_op(std::string_view op, const Value& v);
// Python's `item in container`.
Result<bool> contains(const Value& container, const Value& item);
// Python's `<` used by sort/min/max: numbers, strings, lists lexicographically.
Result<bool> less_than(const Value& a, const Value& b);

}  // namespace hearth::text::jinja
