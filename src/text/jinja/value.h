// The value model of the Jinja interpreter: the Python objects chat templates handle (None, bool,
// int, float, str, list/tuple, dict, namespace, callables) plus Jinja's Undefined. Containers are
// immutable and shared, as the ImmutableSandboxedEnvironment transformers uses allows no mutation;
// only namespace attributes change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"

namespace hearth::text::jinja {

class Value;
class Interpreter;
struct CallArgs;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
};

// A Python dict: insertion-ordered entries, keys compared with Python equality.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

using NativeFunction = std::function<Result<Value>(Interpreter&, CallArgs&)>;

struct Callable {
  std::string name;  // for messages: "range", "<macro foo>"
  NativeFunction fn;
};

// An attribute bag: Jinja's namespace() (mutable through `set ns.x = ...`) or the `loop` object.
struct ObjectData {
  std::string type_name;
  DictData attrs;
  std::shared_ptr<const Callable> call;  // `loop(...)` for recursive loops; null otherwise
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list or tuple
    kDict,
    kObject,
    kCallable,
  };

  Value() = default;  // Undefined
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict(DictData dict);
  static Value object(std::shared_ptr<ObjectData> object);
  static Value callable(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // int, float or bool (bool is an int subclass in Python).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return is_list() && list_data().is_tuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const {
    return kind_ == Kind::kCallable || (is_object() && object_data()->call != nullptr);
  }

  bool as_bool() const { return scalar_.b; }
  int64_t as_int() const { return is_bool() ? (scalar_.b ? 1 : 0) : scalar_.i; }
  double as_double() const { return is_float() ? scalar_.f : static_cast<double>(as_int()); }
  const std::string& as_string() const;
  const ListData& list_data() const;
  const std::vector<Value>& items() const { return list_data().items; }
  const DictData& dict_data() const;
  const std::shared_ptr<ObjectData>& object_data() const;
  const Callable& callable_data() const;
  // For an Undefined: why it is undefined ("'x' is undefined").
  const std::string& undefined_hint() const;

  // Python's type(x).__name__ ("str", "NoneType", ...).
  std::string type_name() const;
  // Python truthiness.
  bool truthy() const;

 private:
  union Scalar {
    bool b;
    int64_t i;
    double f;
  };
  using Payload = std::variant<std::monostate, std::shared_ptr<const std::string>,
                               std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
                               std::shared_ptr<ObjectData>, std::shared_ptr<const Callable>>;

  Kind kind_ = Kind::kUndefined;
  Scalar scalar_{.i = 0};
  Payload payload_;
};

// Python `==` (1 == 1.0 == True, containers element-wise; Undefined equals only Undefined).
bool values_equal(const Value& a, const Value& b);

// The error for using an Undefined where a value is needed: "'x' is undefined".
Status undefined_error(const Value& v);

// Arguments of one call: positional then keyword, as written at the call site.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Binds arguments to a Python-style signature. `names` lists the parameters in order;
  // returns one Value per name (Undefined when not given) or an error for unknown or duplicate
  // arguments and for more positionals than names. `required` leading names must be given.
  Result<std::vector<Value>> bind(std::string_view function,
                                  const std::vector<std::string_view>& names,
                                  size_t required = 0) const;
};

}  // namespace hearth::text::jinja
