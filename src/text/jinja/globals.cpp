// Global functions templates call: Jinja's range/dict/namespace/joiner/cycler and the two
// transformers adds, raise_exception(message) and strftime_now(format).
#include <ctime>

#include "text/jinja/builtins.h"
#include "text/jinja/py_format.h"

namespace hearth::text::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Result<Value> range_fn(Interpreter&, CallArgs& args) {
  if (!args.keyword.empty()) return invalid_argument_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) {
    return invalid_argument_error("range expected 1 to 3 arguments, got {}", p.size());
  }
  for (const Value& v : p) {
    if (!v.is_int() && !v.is_bool()) {
      return invalid_argument_error("'{}' object cannot be interpreted as an integer",
                                    v.type_name());
    }
  }
  int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) return invalid_argument_error("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      return out_of_range_error(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
    }
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

Result<Value> namespace_fn(Interpreter&, CallArgs& args) {
  auto ns = std::make_shared<ObjectData>();
  ns->type_name = "Namespace";
  for (const Value& v : args.positional) {
    if (!v.is_dict())
      return invalid_argument_error("namespace() positional argument must be a dict");
    for (const auto& [k, val] : v.dict_data().entries) ns->attrs.set(k, val);
  }
  for (const auto& [k, v] : args.keyword) ns->attrs.set(Value::string(k), v);
  return Value::object(std::move(ns));
}

Result<Value> dict_fn(Interpreter&, CallArgs& args) {
  DictData d;
  for (const Value& v : args.positional) {
    if (!v.is_dict()) return invalid_argument_error("dict() positional argument must be a dict");
    for (const auto& [k, val] : v.dict_data().entries) d.set(k, val);
  }
  for (const auto& [k, v] : args.keyword) d.set(Value::string(k), v);
  return Value::dict(std::move(d));
}

Result<Value> joiner_fn(Interpreter&, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind("joiner", {"sep"}));
  std::string sep = bound[0].is_undefined() ? ", " : py_str(bound[0]);
  auto used = std::make_shared<bool>(false);
  return Value::callable("joiner", [sep, used](Interpreter&, CallArgs&) -> Result<Value> {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

Result<Value> cycler_fn(Interpreter&, CallArgs& args) {
  if (args.positional.empty())
    return invalid_argument_error("at least one item has to be provided");
  auto items = std::make_shared<const std::vector<Value>>(args.positional);
  auto obj = std::make_shared<ObjectData>();
  obj->type_name = "Cycler";
  std::weak_ptr<ObjectData> weak = obj;
  auto pos = std::make_shared<size_t>(0);
  obj->attrs.set(Value::string("current"), (*items)[0]);
  obj->attrs.set(
      Value::string("next"),
      Value::callable("next", [items, pos, weak](Interpreter&, CallArgs&) -> Result<Value> {
        Value rv = (*items)[*pos];
        *pos = (*pos + 1) % items->size();
        if (auto o = weak.lock()) o->attrs.set(Value::string("current"), (*items)[*pos]);
        return rv;
      }));
  obj->attrs.set(
      Value::string("reset"),
      Value::callable("reset", [items, pos, weak](Interpreter&, CallArgs&) -> Result<Value> {
        *pos = 0;
        if (auto o = weak.lock()) o->attrs.set(Value::string("current"), (*items)[0]);
        return Value::none();
      }));
  return Value::object(std::move(obj));
}

Result<Value> raise_exception_fn(Interpreter&, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind("raise_exception", {"message"}, 1));
  return invalid_argument_error("{}", py_str(bound[0]));
}

Result<Value> strftime_now_fn(Interpreter&, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(auto bound, args.bind("strftime_now", {"format"}, 1));
  if (!bound[0].is_string()) return invalid_argument_error("strftime() argument 1 must be str");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string& format = bound[0].as_string();
  if (format.empty()) return Value::string("");
  for (size_t cap = 256; cap <= (1u << 20); cap *= 4) {
    std::string buf(cap, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
    if (n > 0) {
      buf.resize(n);
      return Value::string(std::move(buf));
    }
  }
  return Value::string("");
}

}  // namespace

void register_globals(Environment& env) {
  auto& g = env.globals;
  g["range"] = Value::callable("range", range_fn);
  g["dict"] = Value::callable("dict", dict_fn);
  g["namespace"] = Value::callable("namespace", namespace_fn);
  g["joiner"] = Value::callable("joiner", joiner_fn);
  g["cycler"] = Value::callable("cycler", cycler_fn);
  g["raise_exception"] = Value::callable("raise_exception", raise_exception_fn);
  g["strftime_now"] = Value::callable("strftime_now", strftime_now_fn);
}

std::shared_ptr<const Environment> Environment::make_default() {
  auto env = std::make_shared<Environment>();
  register_filters(*env);
  register_tests(*env);
  register_globals(*env);
  return env;
}

}  // namespace hearth::text::jinja
