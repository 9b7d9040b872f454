// Jinja's builtin tests (`x is defined`, `x is string`, `x is equalto 3`, ...) with the
// Python type rules jinja2/tests.py applies (bool counts as a number, not as an integer).
#include <cmath>

#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

Result<Value> one_arg(CallArgs& args, std::string_view name) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind(name, {"other"}, 1));
  return bound[0];
}

TestFn compare_test(std::string_view op) {
  std::string o(op);
  return [o](Interpreter&, const Value& v, CallArgs& args) -> Result<bool> {
    HEARTH_ASSIGN_OR_RETURN(Value other, one_arg(args, o));
    return compare_op(o, v, other);
  };
}

TestFn no_args(bool (*pred)(const Value&)) {
  return [pred](Interpreter&, const Value& v, CallArgs& args) -> Result<bool> {
    HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind("test", {}));
    return pred(v);
  };
}

bool string_case(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  const std::string& s = v.as_string();
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = decode_utf8(s, i);
    if (upper ? is_py_cased_lower(cp) : is_py_cased_upper(cp)) return false;
    cased = cased || (upper ? is_py_cased_upper(cp) : is_py_cased_lower(cp));
  }
  return cased;
}

}  // namespace

void register_tests(Environment& env) {
  auto& t = env.tests;
  t["defined"] = no_args([](const Value& v) { return !v.is_undefined(); });
  t["undefined"] = no_args([](const Value& v) { return v.is_undefined(); });
  t["none"] = no_args([](const Value& v) { return v.is_none(); });
  t["boolean"] = no_args([](const Value& v) { return v.is_bool(); });
  t["true"] = no_args([](const Value& v) { return v.is_bool() && v.as_bool(); });
  t["false"] = no_args([](const Value& v) { return v.is_bool() && !v.as_bool(); });
  t["integer"] = no_args([](const Value& v) { return v.is_int(); });
  t["float"] = no_args([](const Value& v) { return v.is_float(); });
  t["number"] = no_args([](const Value& v) { return v.is_number(); });
  t["string"] = no_args([](const Value& v) { return v.is_string(); });
  t["mapping"] = no_args([](const Value& v) { return v.is_dict(); });
  t["sequence"] = no_args([](const Value& v) {
    return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  });
  t["iterable"] = no_args([](const Value& v) {
    return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  });
  t["callable"] = no_args([](const Value& v) { return v.is_callable(); });
  t["escaped"] = no_args([](const Value&) { return false; });
  t["lower"] = no_args([](const Value& v) { return string_case(v, false); });
  t["upper"] = no_args([](const Value& v) { return string_case(v, true); });
  t["odd"] = [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> {
    if (!v.is_number()) return invalid_argument_error("odd test needs a number");
    if (v.is_float()) return std::fmod(v.as_double(), 2.0) != 0;
    return v.as_int() % 2 != 0;
  };
  t["even"] = [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> {
    if (!v.is_number()) return invalid_argument_error("even test needs a number");
    if (v.is_float()) return std::fmod(v.as_double(), 2.0) == 0;
    return v.as_int() % 2 == 0;
  };
  t["divisibleby"] = [](Interpreter&, const Value& v, CallArgs& args) -> Result<bool> {
    HEARTH_ASSIGN_OR_RETURN(Value num, one_arg(args, "divisibleby"));
    if (!v.is_number() || !num.is_number()) {
      return invalid_argument_error("divisibleby test needs numbers");
    }
    if (num.as_double() == 0) return invalid_argument_error("integer modulo by zero");
    if (v.is_float() || num.is_float()) return std::fmod(v.as_double(), num.as_double()) == 0;
    return v.as_int() % num.as_int() == 0;
  };
  for (const char* n : {"==", "eq", "equalto"}) t[n] = compare_test("==");
  for (const char* n : {"!=", "ne"}) t[n] = compare_test("!=");
  for (const char* n : {"<", "lt", "lessthan"}) t[n] = compare_test("<");
  for (const char* n : {"<=", "le"}) t[n] = compare_test("<=");
  for (const char* n : {">", "gt", "greaterthan"}) t[n] = compare_test(">");
  for (const char* n : {">=", "ge"}) t[n] = compare_test(">=");
  t["in"] = [](Interpreter&, const Value& v, CallArgs& args) -> Result<bool> {
    HEARTH_ASSIGN_OR_RETURN(Value seq, one_arg(args, "in"));
    return contains(seq, v);
  };
  t["sameas"] = [](Interpreter&, const Value& v, CallArgs& args) -> Result<bool> {
    HEARTH_ASSIGN_OR_RETURN(Value other, one_arg(args, "sameas"));
    if (v.kind() != other.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool() || v.is_int()) return v.as_int() == other.as_int();
    if (v.is_object() || v.is_callable()) return values_equal(v, other);
    return false;
  };
  t["filter"] = [](Interpreter& in, const Value& v, CallArgs&) -> Result<bool> {
    return v.is_string() && in.env().filters.count(v.as_string()) > 0;
  };
  t["test"] = [](Interpreter& in, const Value& v, CallArgs&) -> Result<bool> {
    return v.is_string() && in.env().tests.count(v.as_string()) > 0;
  };
}

}  // namespace hearth::text::jinja
