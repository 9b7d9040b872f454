// Walks a parsed template against a context and writes the output. Holds the render's state:
// variable frames (Jinja scoping: loop bodies, macros, with/filter/set blocks get their own),
// the output buffer and the sandbox budgets (loop iterations, call depth, output size).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace hearth::text::jinja {

struct RenderLimits {
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together
  int max_call_depth = 100;                 // nested macro calls and recursive loops
  size_t max_output_bytes = 64u << 20;      // also caps any one string a template builds
};

using FilterFn = std::function<Result<Value>(Interpreter&, const Value&, CallArgs&)>;
using TestFn = std::function<Result<bool>(Interpreter&, const Value&, CallArgs&)>;

// Filters, tests and global functions; built once per template and shared by its renders.
struct Environment {
  std::unordered_map<std::string, FilterFn> filters;
  std::unordered_map<std::string, TestFn> tests;
  std::unordered_map<std::string, Value> globals;

  // The builtin set transformers' ImmutableSandboxedEnvironment offers, with its tojson,
  // raise_exception and strftime_now.
  static std::shared_ptr<const Environment> make_default();
};

class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) {}
  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  std::shared_ptr<Frame> parent_;
  std::unordered_map<std::string, Value> vars_;
};

class Interpreter {
 public:
  Interpreter(std::shared_ptr<const Environment> env, RenderLimits limits);

  // Renders body with `context` as the template's variables.
  Result<std::string> render(const Body& body, const DictData& context);

  // Services for filters, tests, methods and globals.
  Result<Value> call(const Value& callee, CallArgs& args);
  Result<Value> apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  Result<bool> apply_test(const std::string& name, const Value& subject, CallArgs& args);
  Result<Value> get_attr(const Value& subject, const std::string& name);
  Result<Value> get_item(const Value& subject, const Value& key);
  // Items of an iterable as Jinja's `for` sees them (dict -> keys, str -> characters).
  Result<std::vector<Value>> iterate(const Value& v);
  // Counts loop work against the budget.
  Status charge(int64_t iterations);
  const RenderLimits& limits() const { return limits_; }
  const Environment& env() const { return *env_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Result<Flow> exec_body(const Body& body, const std::shared_ptr<Frame>& frame);
  Result<Flow> exec(const Stmt& s, const std::shared_ptr<Frame>& frame);
  Status exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, const Value& iterable,
                  int depth);
  Status exec_set(const Stmt& s, const std::shared_ptr<Frame>& frame);
  Status exec_call_block(const Stmt& s, const std::shared_ptr<Frame>& frame);
  Result<std::string> capture(const Body& body, const std::shared_ptr<Frame>& frame);
  Status assign(const Target& target, const Value& value, Frame& frame, int line);
  Value make_macro(const Stmt& s, const std::shared_ptr<Frame>& frame);
  Status write(std::string_view text);

  Result<Value> eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  Result<Value> eval_inner(const Expr& e, const std::shared_ptr<Frame>& frame);
  Result<CallArgs> eval_call_args(const Expr::CallSite& site, const std::shared_ptr<Frame>& f);
  Result<Value> eval_filter(const Expr& e, const std::shared_ptr<Frame>& frame,
                            const Value* block_content);
  Result<Value> eval_slice(const Value& subject, const Expr& slice,
                           const std::shared_ptr<Frame>& frame);
  Status annotate(Status st, int line);

  std::shared_ptr<const Environment> env_;
  RenderLimits limits_;
  std::string out_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  bool error_annotated_ = false;  // the failing node closest to the error named its line
};

}  // namespace hearth::text::jinja
