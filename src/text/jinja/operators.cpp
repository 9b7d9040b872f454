// Arithmetic, comparison and membership with Python's rules and error messages.
#include "text/jinja/operators.h"

#include <fmt/format.h>

#include <cmath>

#include "text/jinja/py_format.h"
#include "text/jinja/string_format.h"

namespace hearth::text::jinja {
namespace {

Status unsupported(std::string_view op, const Value& a, const Value& b) {
  return invalid_argument_error("unsupported operand type(s) for {}: '{}' and '{}'", op,
                                a.type_name(), b.type_name());
}

Status overflow() { return out_of_range_error("integer overflow"); }

Result<Value> repeat(const Value& seq, int64_t n, size_t max_len) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > max_len / s.size()) {
      return out_of_range_error("string repetition exceeds the output limit");
    }
    std::string out;
    out.reserve(s.size() * n);
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(n) > max_len / items.size()) {
    return out_of_range_error("list repetition exceeds the output limit");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// CPython's float_floor_div.
double float_floor_div(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, x / y);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

Result<Value> arithmetic(std::string_view op, const Value& a, const Value& b) {
  bool use_float = a.is_float() || b.is_float();
  if (op == "/") {
    if (b.as_double() == 0) return invalid_argument_error("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (use_float) {
    double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::floating(x + y);
    if (op == "-") return Value::floating(x - y);
    if (op == "*") return Value::floating(x * y);
    if (op == "**") return Value::floating(std::pow(x, y));
    if (y == 0) {
      return invalid_argument_error("{}",
                                    op == "//" ? "float floor division by zero" : "float modulo");
    }
    if (op == "//") return Value::floating(float_floor_div(x, y));
    return Value::floating(py_fmod(x, y));
  }
  int64_t x = a.as_int(), y = b.as_int(), r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) return overflow();
    return Value::integer(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) return overflow();
    return Value::integer(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) return overflow();
    return Value::integer(r);
  }
  if (op == "**") {
    if (y < 0) return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
    r = 1;
    for (int64_t i = 0; i < y; ++i) {
      if (__builtin_mul_overflow(r, x, &r)) return overflow();
      if (r == 0 || r == 1) break;
    }
    if (r == -1 && x == -1) r = (y % 2 == 0) ? 1 : -1;
    return Value::integer(r);
  }
  if (y == 0) {
    return invalid_argument_error(
        "{}", op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
  }
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  return Value::integer(op == "//" ? q : m);
}

Result<int> compare_lists(const std::vector<Value>& a, const std::vector<Value>& b);

// Three-way comparison for ordering; error when Python would raise TypeError.
Result<int> three_way(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    return compare_lists(a.items(), b.items());
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  return invalid_argument_error("'{}' not supported between instances of '{}' and '{}'", op,
                                a.type_name(), b.type_name());
}

Result<int> compare_lists(const std::vector<Value>& a, const std::vector<Value>& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (values_equal(a[i], b[i])) continue;
    return three_way(a[i], b[i], "<");
  }
  return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
}

}  // namespace

Result<Value> binary_op(std::string_view op, const Value& a, const Value& b, size_t max_len) {
  if (op == "~") {
    std::string s = py_str(a) + py_str(b);
    if (s.size() > max_len) return out_of_range_error("string exceeds the output limit");
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_len) {
        return out_of_range_error("string exceeds the output limit");
      }
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (a.is_string()) {
      return invalid_argument_error("can only concatenate str (not \"{}\") to str", b.type_name());
    }
    if (a.is_list() && !a.is_tuple()) {
      return invalid_argument_error("can only concatenate list (not \"{}\") to list",
                                    b.type_name());
    }
    return unsupported(op, a, b);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
      return repeat(a, b.as_int(), max_len);
    }
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
      return repeat(b, a.as_int(), max_len);
    }
    if (a.is_string() || b.is_string() || a.is_list() || b.is_list()) {
      return invalid_argument_error("can't multiply sequence by non-int of type '{}'",
                                    (a.is_string() || a.is_list()) ? b.type_name() : a.type_name());
    }
    return unsupported(op, a, b);
  }
  if (op == "%" && a.is_string()) {
    HEARTH_ASSIGN_OR_RETURN(std::string s, percent_format(a.as_string(), b));
    return Value::string(std::move(s));
  }
  return unsupported(op == "**" ? "** or pow()" : op, a, b);
}

Result<bool> compare_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") {
    HEARTH_ASSIGN_OR_RETURN(bool in, contains(b, a));
    return !in;
  }
  HEARTH_ASSIGN_OR_RETURN(int c, three_way(a, b, op));
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  if (op == ">=") return c >= 0;
  return invalid_argument_error("unknown comparison '{}'", op);
}

Result<Value> unary_op(std::string_view op, const Value& v) {
  if (v.is_undefined()) return undefined_error(v);
  if (!v.is_number()) {
    return invalid_argument_error("bad operand type for unary {}: '{}'", op, v.type_name());
  }
  if (v.is_float()) return Value::floating(op == "-" ? -v.as_double() : v.as_double());
  int64_t i = v.as_int();
  if (op == "-") {
    if (i == INT64_MIN) return overflow();
    i = -i;
  }
  return Value::integer(i);
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return invalid_argument_error("'in <string>' requires string as left operand, not {}",
                                      item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (item.is_list() && !item.is_tuple()) {
        return invalid_argument_error("unhashable type: 'list'");
      }
      if (item.is_dict()) return invalid_argument_error("unhashable type: 'dict'");
      return container.dict_data().find(item) != nullptr;
    case Value::Kind::kObject:
      return container.object_data()->attrs.find(item) != nullptr;
    default:
      return invalid_argument_error("argument of type '{}' is not iterable", container.type_name());
  }
}

Result<bool> less_than(const Value& a, const Value& b) {
  HEARTH_ASSIGN_OR_RETURN(int c, three_way(a, b, "<"));
  return c < 0;
}

}  // namespace hearth::text::jinja
