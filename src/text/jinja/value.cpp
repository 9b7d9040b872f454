// Construction, accessors, truthiness and equality of Jinja values, and argument binding.
#include "text/jinja/value.h"

#include "base/check.h"

namespace hearth::text::jinja {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (values_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.payload_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.scalar_.b = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.scalar_.i = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.scalar_.f = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.payload_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.payload_ = std::make_shared<const ListData>(ListData{std::move(items), false});
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.payload_ = std::make_shared<const ListData>(ListData{std::move(items), true});
  return v;
}

Value Value::dict(DictData dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.payload_ = std::make_shared<const DictData>(std::move(dict));
  return v;
}

Value Value::object(std::shared_ptr<ObjectData> object) {
  Value v;
  v.kind_ = Kind::kObject;
  v.payload_ = std::move(object);
  return v;
}

Value Value::callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.payload_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::as_string() const {
  HEARTH_CHECK(is_string());
  return *std::get<std::shared_ptr<const std::string>>(payload_);
}

const ListData& Value::list_data() const {
  HEARTH_CHECK(is_list());
  return *std::get<std::shared_ptr<const ListData>>(payload_);
}

const DictData& Value::dict_data() const {
  HEARTH_CHECK(is_dict());
  return *std::get<std::shared_ptr<const DictData>>(payload_);
}

const std::shared_ptr<ObjectData>& Value::object_data() const {
  HEARTH_CHECK(is_object());
  return std::get<std::shared_ptr<ObjectData>>(payload_);
}

const Callable& Value::callable_data() const {
  if (is_object()) return *object_data()->call;
  HEARTH_CHECK(kind_ == Kind::kCallable);
  return *std::get<std::shared_ptr<const Callable>>(payload_);
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  if (!is_undefined()) return kEmpty;
  const auto* p = std::get_if<std::shared_ptr<const std::string>>(&payload_);
  return p != nullptr ? **p : kEmpty;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return is_tuple() ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kObject:
      return object_data()->type_name;
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return scalar_.b;
    case Kind::kInt:
      return scalar_.i != 0;
    case Kind::kFloat:
      return scalar_.f != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !items().empty();
    case Kind::kDict:
      return !dict_data().entries.empty();
    case Kind::kObject:
    case Kind::kCallable:
      return true;
  }
  return true;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!values_equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const auto& ea = a.dict_data().entries;
      if (ea.size() != b.dict_data().entries.size()) return false;
      for (const auto& [k, v] : ea) {
        const Value* other = b.dict_data().find(k);
        if (other == nullptr || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kObject:
      return a.object_data() == b.object_data();
    case Value::Kind::kCallable:
      return &a.callable_data() == &b.callable_data();
    default:
      return false;
  }
}

Status undefined_error(const Value& v) {
  const std::string& hint = v.undefined_hint();
  return invalid_argument_error("{}", hint.empty() ? "undefined value" : hint);
}

Result<std::vector<Value>> CallArgs::bind(std::string_view function,
                                          const std::vector<std::string_view>& names,
                                          size_t required) const {
  if (positional.size() > names.size()) {
    return invalid_argument_error("{}() takes at most {} arguments ({} given)", function,
                                  names.size(), positional.size());
  }
  std::vector<Value> bound(names.size());
  std::vector<bool> given(names.size(), false);
  for (size_t i = 0; i < positional.size(); ++i) {
    bound[i] = positional[i];
    given[i] = true;
  }
  for (const auto& [name, value] : keyword) {
    size_t k = 0;
    while (k < names.size() && names[k] != name) ++k;
    if (k == names.size()) {
      return invalid_argument_error("{}() got an unexpected keyword argument '{}'", function, name);
    }
    if (given[k]) {
      return invalid_argument_error("{}() got multiple values for argument '{}'", function, name);
    }
    bound[k] = value;
    given[k] = true;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!given[i]) {
      return invalid_argument_error("{}() missing required argument '{}'", function, names[i]);
    }
  }
  return bound;
}

}  // namespace hearth::text::jinja
