// Statement execution and expression evaluation. Errors carry the line of the innermost node
// that failed; loops, macro calls and output are metered against RenderLimits.
#include "text/jinja/interpreter.h"

#include <fmt/format.h>

#include "text/jinja/methods.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_format.h"
#include "text/jinja/unicode.h"

namespace hearth::text::jinja {
namespace {

// Jinja's object_type_repr for "'dict object' has no attribute 'x'".
std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return v.type_name() + " object";
}

Value missing_attribute(const Value& subject, const std::string& name) {
  return Value::undefined(
      fmt::format("'{}' has no attribute {}", object_type_repr(subject), py_string_repr(name)));
}

Value missing_item(const Value& subject, const Value& key) {
  if (key.is_string()) return missing_attribute(subject, key.as_string());
  return Value::undefined(
      fmt::format("'{}' has no element {}", object_type_repr(subject), py_repr(key)));
}

// Python's slice.indices().
struct SliceRange {
  int64_t start, stop, step;
};

Result<SliceRange> slice_indices(const Value& start, const Value& stop, const Value& step,
                                 int64_t len) {
  auto as_index = [](const Value& v, const char* what) -> Result<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (v.is_int() || v.is_bool()) return std::optional<int64_t>(v.as_int());
    return invalid_argument_error(
        "slice indices must be integers or None or have an __index__ method ({} is {})", what,
        v.type_name());
  };
  HEARTH_ASSIGN_OR_RETURN(auto st, as_index(step, "step"));
  int64_t s = st.value_or(1);
  if (s == 0) return invalid_argument_error("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> v, bool is_start) {
    if (!v) {
      if (is_start) return s < 0 ? len - 1 : int64_t{0};
      return s < 0 ? int64_t{-1} : len;
    }
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = s < 0 ? -1 : 0;
    } else if (x >= len) {
      x = s < 0 ? len - 1 : len;
    }
    return x;
  };
  HEARTH_ASSIGN_OR_RETURN(auto a, as_index(start, "start"));
  HEARTH_ASSIGN_OR_RETURN(auto b, as_index(stop, "stop"));
  return SliceRange{adjust(a, true), adjust(b, false), s};
}

std::vector<size_t> slice_positions(const SliceRange& r) {
  std::vector<size_t> out;
  if (r.step > 0) {
    for (int64_t i = r.start; i < r.stop; i += r.step) out.push_back(i);
  } else {
    for (int64_t i = r.start; i > r.stop; i += r.step) out.push_back(i);
  }
  return out;
}

}  // namespace

const Value* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent_.get()) {
    auto it = f->vars_.find(name);
    if (it != f->vars_.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(std::shared_ptr<const Environment> env, RenderLimits limits)
    : env_(std::move(env)), limits_(limits) {}

Result<std::string> Interpreter::render(const Body& body, const DictData& context) {
  auto root = std::make_shared<Frame>(nullptr);
  for (const auto& [k, v] : context.entries) {
    if (k.is_string()) root->set(k.as_string(), v);
  }
  out_.clear();
  iterations_ = 0;
  call_depth_ = 0;
  error_annotated_ = false;
  HEARTH_ASSIGN_OR_RETURN(Flow flow, exec_body(body, root));
  (void)flow;
  return std::move(out_);
}

Status Interpreter::annotate(Status st, int line) {
  if (st.ok() || error_annotated_) return st;
  error_annotated_ = true;
  return Status(st.code(), fmt::format("line {}: {}", line, st.message()));
}

Status Interpreter::charge(int64_t iterations) {
  iterations_ += iterations;
  if (iterations_ > limits_.max_loop_iterations) {
    return out_of_range_error("template exceeded {} loop iterations", limits_.max_loop_iterations);
  }
  return ok_status();
}

Status Interpreter::write(std::string_view text) {
  if (out_.size() + text.size() > limits_.max_output_bytes) {
    return out_of_range_error("template output exceeds {} bytes", limits_.max_output_bytes);
  }
  out_.append(text);
  return ok_status();
}

Result<std::string> Interpreter::capture(const Body& body, const std::shared_ptr<Frame>& frame) {
  std::string saved = std::move(out_);
  out_.clear();
  auto flow = exec_body(body, frame);
  std::string captured = std::move(out_);
  out_ = std::move(saved);
  if (!flow.ok()) return flow.status();
  return captured;
}

// ---- statements ----

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body,
                                                 const std::shared_ptr<Frame>& frame) {
  for (const StmtPtr& s : body) {
    HEARTH_ASSIGN_OR_RETURN(Flow flow, exec(*s, frame));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  switch (s.kind) {
    case Stmt::Kind::kData:
      HEARTH_RETURN_IF_ERROR(annotate(write(s.text), s.line));
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*s.expr, frame));
      HEARTH_RETURN_IF_ERROR(annotate(write(py_str(v)), s.line));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.conditions.size(); ++i) {
        HEARTH_ASSIGN_OR_RETURN(Value cond, eval(*s.conditions[i], frame));
        if (cond.truthy()) return exec_body(s.bodies[i], frame);
      }
      return exec_body(s.else_body, frame);
    case Stmt::Kind::kFor: {
      HEARTH_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr, frame));
      HEARTH_RETURN_IF_ERROR(exec_for(s, frame, iterable, 0));
      return Flow::kNormal;
    }
    case Stmt::Kind::kSet:
      HEARTH_RETURN_IF_ERROR(exec_set(s, frame));
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock: {
      HEARTH_ASSIGN_OR_RETURN(std::string text, capture(s.body, std::make_shared<Frame>(frame)));
      Value v = Value::string(std::move(text));
      if (s.expr) {
        HEARTH_ASSIGN_OR_RETURN(v, eval_filter(*s.expr, frame, &v));
      }
      HEARTH_RETURN_IF_ERROR(assign(s.target, v, *frame, s.line));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      frame->set(s.name, make_macro(s, frame));
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock:
      HEARTH_RETURN_IF_ERROR(exec_call_block(s, frame));
      return Flow::kNormal;
    case Stmt::Kind::kFilter: {
      HEARTH_ASSIGN_OR_RETURN(std::string text, capture(s.body, std::make_shared<Frame>(frame)));
      Value content = Value::string(std::move(text));
      HEARTH_ASSIGN_OR_RETURN(Value v, eval_filter(*s.expr, frame, &content));
      HEARTH_RETURN_IF_ERROR(annotate(write(py_str(v)), s.line));
      return Flow::kNormal;
    }
    case Stmt::Kind::kWith: {
      auto inner = std::make_shared<Frame>(frame);
      for (size_t i = 0; i < s.with_targets.size(); ++i) {
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*s.with_values[i], frame));
        inner->set(s.with_targets[i], std::move(v));
      }
      return exec_body(s.body, inner);
    }
    case Stmt::Kind::kScope:
      return exec_body(s.body, frame);
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Status Interpreter::assign(const Target& target, const Value& value, Frame& frame, int line) {
  if (!target.attribute.empty()) {
    const Value* ns = frame.lookup(target.names[0]);
    if (ns == nullptr || !ns->is_object() || ns->object_data()->type_name != "Namespace") {
      return annotate(invalid_argument_error("cannot assign attribute on non-namespace object"),
                      line);
    }
    ns->object_data()->attrs.set(Value::string(target.attribute), value);
    return ok_status();
  }
  if (!target.is_tuple) {
    frame.set(target.names[0], value);
    return ok_status();
  }
  auto items = iterate(value);
  if (!items.ok()) return annotate(items.status(), line);
  size_t got = items.value().size();
  if (got > target.names.size()) {
    return annotate(
        invalid_argument_error("too many values to unpack (expected {})", target.names.size()),
        line);
  }
  if (got < target.names.size()) {
    return annotate(invalid_argument_error("not enough values to unpack (expected {}, got {})",
                                           target.names.size(), got),
                    line);
  }
  for (size_t i = 0; i < target.names.size(); ++i) frame.set(target.names[i], (*items)[i]);
  return ok_status();
}

Status Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  HEARTH_ASSIGN_OR_RETURN(Value v, eval(*s.expr, frame));
  return assign(s.target, v, *frame, s.line);
}

Status Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame,
                             const Value& iterable, int depth) {
  auto all = iterate(iterable);
  if (!all.ok()) return annotate(all.status(), s.line);
  std::vector<Value> items;
  if (s.condition) {
    for (const Value& item : *all) {
      HEARTH_RETURN_IF_ERROR(annotate(charge(1), s.line));
      auto probe = std::make_shared<Frame>(frame);
      HEARTH_RETURN_IF_ERROR(assign(s.target, item, *probe, s.line));
      HEARTH_ASSIGN_OR_RETURN(Value keep, eval(*s.condition, probe));
      if (keep.truthy()) items.push_back(item);
    }
  } else {
    items = std::move(all).value();
  }
  if (items.empty()) {
    HEARTH_ASSIGN_OR_RETURN(Flow flow, exec_body(s.else_body, frame));
    (void)flow;
    return ok_status();
  }

  auto loop = std::make_shared<ObjectData>();
  loop->type_name = "LoopContext";
  auto changed_state = std::make_shared<std::optional<Value>>();
  auto shared_items = std::make_shared<const std::vector<Value>>(items);
  auto index_cell = std::make_shared<size_t>(0);
  int64_t length = static_cast<int64_t>(items.size());
  Value cycle =
      Value::callable("cycle", [index_cell](Interpreter&, CallArgs& args) -> Result<Value> {
        if (args.positional.empty()) return invalid_argument_error("no items for cycling given");
        return args.positional[*index_cell % args.positional.size()];
      });
  Value changed =
      Value::callable("changed", [changed_state](Interpreter&, CallArgs& args) -> Result<Value> {
        Value now = Value::list(args.positional);
        bool differs = !changed_state->has_value() || !values_equal(**changed_state, now);
        *changed_state = now;
        return Value::boolean(differs);
      });
  if (s.recursive) {
    const Stmt* stmt = &s;
    std::shared_ptr<Frame> outer = frame;
    loop->call = std::make_shared<const Callable>(Callable{
        "loop", [stmt, outer, depth](Interpreter& in, CallArgs& args) -> Result<Value> {
          if (args.positional.size() != 1) {
            return invalid_argument_error("loop() takes exactly one argument");
          }
          if (++in.call_depth_ > in.limits_.max_call_depth) {
            return out_of_range_error("recursion deeper than {}", in.limits_.max_call_depth);
          }
          std::string saved = std::move(in.out_);
          in.out_.clear();
          Status st = in.exec_for(*stmt, outer, args.positional[0], depth + 1);
          std::string captured = std::move(in.out_);
          in.out_ = std::move(saved);
          --in.call_depth_;
          if (!st.ok()) return st;
          return Value::string(std::move(captured));
        }});
  }

  for (size_t i = 0; i < items.size(); ++i) {
    HEARTH_RETURN_IF_ERROR(annotate(charge(1), s.line));
    *index_cell = i;
    int64_t idx = static_cast<int64_t>(i);
    DictData& a = loop->attrs;
    a.entries.clear();
    a.entries.reserve(14);
    auto put = [&](const char* k, Value v) {
      a.entries.emplace_back(Value::string(k), std::move(v));
    };
    put("index0", Value::integer(idx));
    put("index", Value::integer(idx + 1));
    put("revindex0", Value::integer(length - idx - 1));
    put("revindex", Value::integer(length - idx));
    put("first", Value::boolean(i == 0));
    put("last", Value::boolean(idx == length - 1));
    put("length", Value::integer(length));
    put("depth0", Value::integer(depth));
    put("depth", Value::integer(depth + 1));
    put("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    put("nextitem", idx + 1 < length ? items[i + 1] : Value::undefined("there is no next item"));
    put("cycle", cycle);
    put("changed", changed);

    auto iter_frame = std::make_shared<Frame>(frame);
    iter_frame->set("loop", Value::object(loop));
    HEARTH_RETURN_IF_ERROR(assign(s.target, items[i], *iter_frame, s.line));
    HEARTH_ASSIGN_OR_RETURN(Flow flow, exec_body(s.body, iter_frame));
    if (flow == Flow::kBreak) break;
  }
  return ok_status();
}

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  const Stmt* stmt = &s;
  std::shared_ptr<Frame> closure = frame;
  return Value::callable(s.name, [stmt, closure](Interpreter& in, CallArgs& args) -> Result<Value> {
    if (++in.call_depth_ > in.limits_.max_call_depth) {
      return out_of_range_error("recursion deeper than {}", in.limits_.max_call_depth);
    }
    auto mframe = std::make_shared<Frame>(closure);
    const auto& params = stmt->params;
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        mframe->set(params[i].name, args.positional[i]);
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    DictData kwargs;
    std::vector<bool> given(params.size(), false);
    for (size_t i = 0; i < params.size() && i < args.positional.size(); ++i) given[i] = true;
    for (const auto& [name, value] : args.keyword) {
      if (name == "caller") {
        mframe->set("caller", value);
        continue;
      }
      size_t k = 0;
      while (k < params.size() && params[k].name != name) ++k;
      if (k == params.size()) {
        kwargs.set(Value::string(name), value);
        continue;
      }
      if (given[k]) {
        --in.call_depth_;
        return invalid_argument_error("macro '{}' got multiple values for argument '{}'",
                                      stmt->name, name);
      }
      given[k] = true;
      mframe->set(name, value);
    }
    for (size_t k = 0; k < params.size(); ++k) {
      if (given[k]) continue;
      if (params[k].default_value) {
        auto v = in.eval(*params[k].default_value, mframe);
        if (!v.ok()) {
          --in.call_depth_;
          return v.status();
        }
        mframe->set(params[k].name, std::move(v).value());
      } else {
        mframe->set(params[k].name, Value::undefined(fmt::format("parameter '{}' was not provided",
                                                                 params[k].name)));
      }
    }
    mframe->set("varargs", Value::tuple(std::move(varargs)));
    mframe->set("kwargs", Value::dict(std::move(kwargs)));
    auto text = in.capture(stmt->body, mframe);
    --in.call_depth_;
    if (!text.ok()) return text.status();
    return Value::string(std::move(text).value());
  });
}

Status Interpreter::exec_call_block(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  // The caller macro borrows the call block's params and body for the duration of the call.
  const Stmt* self = &s;
  std::shared_ptr<Frame> closure = frame;
  Value caller =
      Value::callable("caller", [self, closure](Interpreter& in, CallArgs& args) -> Result<Value> {
        auto cframe = std::make_shared<Frame>(closure);
        for (size_t k = 0; k < self->params.size(); ++k) {
          Value v;
          if (k < args.positional.size()) {
            v = args.positional[k];
          } else if (self->params[k].default_value) {
            HEARTH_ASSIGN_OR_RETURN(v, in.eval(*self->params[k].default_value, cframe));
          }
          for (const auto& [name, value] : args.keyword) {
            if (name == self->params[k].name) v = value;
          }
          cframe->set(self->params[k].name, v);
        }
        HEARTH_ASSIGN_OR_RETURN(std::string text, in.capture(self->body, cframe));
        return Value::string(std::move(text));
      });
  const Expr& call = *s.expr;
  HEARTH_ASSIGN_OR_RETURN(Value callee, eval(*call.args[0], frame));
  auto args = eval_call_args(call.call, frame);
  if (!args.ok()) return annotate(args.status(), s.line);
  args->keyword.emplace_back("caller", caller);
  auto result = this->call(callee, *args);
  if (!result.ok()) return annotate(result.status(), s.line);
  return annotate(write(py_str(*result)), s.line);
}

// ---- expressions ----

Result<Value> Interpreter::eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  auto r = eval_inner(e, frame);
  if (!r.ok()) return annotate(r.status(), e.line);
  return r;
}

Result<CallArgs> Interpreter::eval_call_args(const Expr::CallSite& site,
                                             const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  for (const auto& p : site.positional) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*p, frame));
    args.positional.push_back(std::move(v));
  }
  if (site.star_args) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*site.star_args, frame));
    HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    for (auto& item : items) args.positional.push_back(std::move(item));
  }
  for (const auto& [name, expr] : site.keyword) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*expr, frame));
    args.keyword.emplace_back(name, std::move(v));
  }
  if (site.star_kwargs) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*site.star_kwargs, frame));
    if (!v.is_dict()) return invalid_argument_error("argument after ** must be a mapping");
    for (const auto& [k, val] : v.dict_data().entries) {
      if (!k.is_string()) return invalid_argument_error("keywords must be strings");
      args.keyword.emplace_back(k.as_string(), val);
    }
  }
  return args;
}

Result<Value> Interpreter::eval_filter(const Expr& e, const std::shared_ptr<Frame>& frame,
                                       const Value* block_content) {
  Value subject;
  if (e.args[0]) {
    if (e.args[0]->kind == Expr::Kind::kFilter) {
      HEARTH_ASSIGN_OR_RETURN(subject, eval_filter(*e.args[0], frame, block_content));
    } else {
      HEARTH_ASSIGN_OR_RETURN(subject, eval(*e.args[0], frame));
    }
  } else if (block_content != nullptr) {
    subject = *block_content;
  }
  HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_call_args(e.call, frame));
  auto r = apply_filter(e.name, subject, args);
  if (!r.ok()) return annotate(r.status(), e.line);
  return r;
}

Result<Value> Interpreter::eval_slice(const Value& subject, const Expr& slice,
                                      const std::shared_ptr<Frame>& frame) {
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    if (slice.args[i]) {
      HEARTH_ASSIGN_OR_RETURN(parts[i], eval(*slice.args[i], frame));
    }
  }
  if (subject.is_undefined()) return undefined_error(subject);
  if (subject.is_string()) {
    const std::string& s = subject.as_string();
    std::vector<size_t> offsets = codepoint_offsets(s);
    int64_t len = static_cast<int64_t>(offsets.size()) - 1;
    HEARTH_ASSIGN_OR_RETURN(SliceRange r, slice_indices(parts[0], parts[1], parts[2], len));
    std::string out;
    if (r.step == 1) {
      if (r.start < r.stop) out = s.substr(offsets[r.start], offsets[r.stop] - offsets[r.start]);
    } else {
      for (size_t i : slice_positions(r)) out += s.substr(offsets[i], offsets[i + 1] - offsets[i]);
    }
    return Value::string(std::move(out));
  }
  if (subject.is_list()) {
    const auto& items = subject.items();
    HEARTH_ASSIGN_OR_RETURN(SliceRange r, slice_indices(parts[0], parts[1], parts[2],
                                                        static_cast<int64_t>(items.size())));
    std::vector<Value> out;
    for (size_t i : slice_positions(r)) out.push_back(items[i]);
    return subject.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  return Value::undefined(fmt::format("'{}' has no element slice", object_type_repr(subject)));
}

Result<Value> Interpreter::eval_inner(const Expr& e, const std::shared_ptr<Frame>& frame) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName: {
      if (const Value* v = frame->lookup(e.name)) return *v;
      auto it = env_->globals.find(e.name);
      if (it != env_->globals.end()) return it->second;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) {
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*a, frame));
        items.push_back(std::move(v));
      }
      return e.kind == Expr::Kind::kList ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
    }
    case Expr::Kind::kDict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        HEARTH_ASSIGN_OR_RETURN(Value k, eval(*e.args[i], frame));
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1], frame));
        if (k.is_dict() || (k.is_list() && !k.is_tuple())) {
          return invalid_argument_error("unhashable type: '{}'", k.type_name());
        }
        d.set(std::move(k), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kGetAttr: {
      HEARTH_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0], frame));
      return get_attr(subject, e.name);
    }
    case Expr::Kind::kGetItem: {
      HEARTH_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0], frame));
      if (e.args[1]->kind == Expr::Kind::kSlice) return eval_slice(subject, *e.args[1], frame);
      HEARTH_ASSIGN_OR_RETURN(Value key, eval(*e.args[1], frame));
      return get_item(subject, key);
    }
    case Expr::Kind::kSlice:
      return invalid_argument_error("slice outside of a subscript");
    case Expr::Kind::kCall: {
      HEARTH_ASSIGN_OR_RETURN(Value callee, eval(*e.args[0], frame));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_call_args(e.call, frame));
      return call(callee, args);
    }
    case Expr::Kind::kFilter:
      return eval_filter(e, frame, nullptr);
    case Expr::Kind::kTest: {
      HEARTH_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0], frame));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_call_args(e.call, frame));
      HEARTH_ASSIGN_OR_RETURN(bool r, apply_test(e.name, subject, args));
      return Value::boolean(r != e.negated);
    }
    case Expr::Kind::kUnary: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.args[0], frame));
      if (e.name == "not") return Value::boolean(!v.truthy());
      return unary_op(e.name, v);
    }
    case Expr::Kind::kBinary: {
      HEARTH_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], frame));
      if (e.name == "and") return a.truthy() ? eval(*e.args[1], frame) : a;
      if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], frame);
      HEARTH_ASSIGN_OR_RETURN(Value b, eval(*e.args[1], frame));
      return binary_op(e.name, a, b, limits_.max_output_bytes);
    }
    case Expr::Kind::kCompare: {
      HEARTH_ASSIGN_OR_RETURN(Value left, eval(*e.args[0], frame));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        HEARTH_ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1], frame));
        HEARTH_ASSIGN_OR_RETURN(bool ok, compare_op(e.ops[i], left, right));
        if (!ok) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::kCondition: {
      HEARTH_ASSIGN_OR_RETURN(Value cond, eval(*e.args[1], frame));
      if (cond.truthy()) return eval(*e.args[0], frame);
      if (e.args[2]) return eval(*e.args[2], frame);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return internal_error("unknown expression kind");
}

// ---- services ----

Result<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) return undefined_error(callee);
  if (!callee.is_callable()) {
    return invalid_argument_error("'{}' object is not callable", callee.type_name());
  }
  return callee.callable_data().fn(*this, args);
}

Result<Value> Interpreter::apply_filter(const std::string& name, const Value& subject,
                                        CallArgs& args) {
  auto it = env_->filters.find(name);
  if (it == env_->filters.end()) return invalid_argument_error("No filter named '{}'.", name);
  return it->second(*this, subject, args);
}

Result<bool> Interpreter::apply_test(const std::string& name, const Value& subject,
                                     CallArgs& args) {
  auto it = env_->tests.find(name);
  if (it == env_->tests.end()) return invalid_argument_error("No test named '{}'.", name);
  return it->second(*this, subject, args);
}

Result<Value> Interpreter::get_attr(const Value& subject, const std::string& name) {
  if (subject.is_undefined()) return undefined_error(subject);
  if (std::optional<Value> method = lookup_method(subject, name)) return *method;
  if (subject.is_dict()) {
    if (const Value* v = subject.dict_data().find(std::string_view(name))) return *v;
  } else if (subject.is_object()) {
    if (const Value* v = subject.object_data()->attrs.find(std::string_view(name))) return *v;
  }
  return missing_attribute(subject, name);
}

Result<Value> Interpreter::get_item(const Value& subject, const Value& key) {
  if (subject.is_undefined()) return undefined_error(subject);
  if (subject.is_dict()) {
    if (const Value* v = subject.dict_data().find(key)) return *v;
  } else if ((subject.is_list() || subject.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (subject.is_list()) {
      int64_t n = static_cast<int64_t>(subject.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return subject.items()[i];
    } else {
      std::vector<size_t> offsets = codepoint_offsets(subject.as_string());
      int64_t n = static_cast<int64_t>(offsets.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        return Value::string(subject.as_string().substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
    }
  } else if (subject.is_object() && key.is_string()) {
    if (const Value* v = subject.object_data()->attrs.find(key)) return *v;
  }
  if (key.is_string()) {
    if (std::optional<Value> method = lookup_method(subject, key.as_string())) return *method;
  }
  return missing_item(subject, key);
}

Result<std::vector<Value>> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.dict_data().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        decode_utf8(s, i);
        chars.push_back(Value::string(s.substr(start, i - start)));
      }
      return chars;
    }
    default:
      return invalid_argument_error("'{}' object is not iterable", v.type_name());
  }
}

}  // namespace hearth::text::jinja
