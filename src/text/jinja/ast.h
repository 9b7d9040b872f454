// The parsed form of a template: expression and statement nodes, built once by the parser and
// walked by the interpreter for every render. Each node remembers its line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace hearth::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args = items
    kTuple,     // args = items
    kDict,      // args = key, value, key, value, ...
    kGetAttr,   // args[0] . name
    kGetItem,   // args[0] [ args[1] ]
    kSlice,     // args = start, stop, step (null when omitted); only inside kGetItem
    kCall,      // args[0] ( call )
    kFilter,    // name; args[0] = subject (null inside filter blocks); call holds the rest
    kTest,      // name; args[0] = subject; call holds the rest; negated
    kUnary,     // name = "-", "+", "not"; args[0]
    kBinary,    // name = operator; args[0], args[1]; "and"/"or" short-circuit
    kCompare,   // args[0] then ops[i] args[i+1], chained as Python does
    kCondition  // args[0] if args[1] else args[2] (args[2] may be null)
  };

  // Arguments at a call site, in source order.
  struct CallSite {
    std::vector<ExprPtr> positional;
    std::vector<std::pair<std::string, ExprPtr>> keyword;
    ExprPtr star_args;    // *args
    ExprPtr star_kwargs;  // **kwargs
  };

  Kind kind = Kind::kLiteral;
  int line = 1;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::string> ops;  // kCompare
  CallSite call;
  bool negated = false;  // kTest: `is not`
};

// An assignment target: `x`, `a, b` or `ns.attr`.
struct Target {
  std::vector<std::string> names;  // several for tuple unpacking
  std::string attribute;           // non-empty for `ns.attr`
  bool is_tuple = false;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  enum class Kind {
    kData,       // text
    kOutput,     // expr
    kIf,         // conditions[i] -> bodies[i]; else_body
    kFor,        // target in expr [if condition] recursive?; body; else_body
    kSet,        // target = expr
    kSetBlock,   // target = rendered body, through expr (a filter chain) when given
    kMacro,      // name(params) body
    kCallBlock,  // call expr with caller(params) = body
    kFilter,     // expr (a filter chain) applied to the rendered body
    kWith,       // with_targets = with_values; body
    kBreak,
    kContinue,
    kScope,  // body rendered as-is (transformers' {% generation %})
  };

  Kind kind = Kind::kData;
  int line = 1;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  Target target;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  bool recursive = false;
  std::string name;
  std::vector<MacroParam> params;
  std::vector<std::string> with_targets;
  std::vector<ExprPtr> with_values;
};

}  // namespace hearth::text::jinja
