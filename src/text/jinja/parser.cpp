// A recursive-descent parser with Jinja2's precedence ladder:
// condexpr > or > and > not > compare > + - > ~ > * / // % > ** > unary > postfix | filter | is.
#include "text/jinja/parser.h"

#include <fmt/format.h>

#include <initializer_list>

namespace hearth::text::jinja {
namespace {

constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<Body> parse_template() {
    HEARTH_ASSIGN_OR_RETURN(Body body, subparse({}));
    if (cur().type != TokenType::kEof) {
      return fail(fmt::format("Encountered unknown tag '{}'.", cur().value));
    }
    return body;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const {
    return cur().type == TokenType::kOperator && cur().value == op;
  }
  bool is_name(std::string_view name) const {
    return cur().type == TokenType::kName && cur().value == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof:
        return "end of template";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kVariableEnd:
        return "end of print statement";
      case TokenType::kBlockBegin:
        return "begin of statement block";
      case TokenType::kVariableBegin:
        return "begin of print statement";
      case TokenType::kData:
        return "template data";
      default:
        return t.value;
    }
  }

  Status fail(std::string_view message, int line = 0) const {
    return parse_error("line {}: {}", line > 0 ? line : cur().line, message);
  }
  Status expect_op(std::string_view op) {
    if (skip_op(op)) return ok_status();
    if (cur().type == TokenType::kEof) {
      return fail(fmt::format("unexpected end of template, expected '{}'.", op));
    }
    return fail(fmt::format("expected token '{}', got '{}'", op, describe(cur())));
  }
  Result<std::string> expect_name() {
    if (cur().type != TokenType::kName) {
      return fail(fmt::format("expected token 'name', got '{}'", describe(cur())));
    }
    std::string v = cur().value;
    advance();
    return v;
  }
  Status expect(TokenType type, std::string_view what) {
    if (cur().type == type) {
      advance();
      return ok_status();
    }
    if (cur().type == TokenType::kEof) {
      return fail(fmt::format("unexpected end of template, expected '{}'.", what));
    }
    return fail(fmt::format("expected token '{}', got '{}'", what, describe(cur())));
  }

  ExprPtr node(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  bool at_end_tag(const std::vector<std::string_view>& end_tags) const {
    if (cur().type != TokenType::kName) return false;
    for (auto tag : end_tags) {
      if (cur().value == tag) return true;
    }
    return false;
  }

  Result<Body> subparse(const std::vector<std::string_view>& end_tags) {
    Body body;
    while (cur().type != TokenType::kEof) {
      const Token& t = cur();
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kData;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVariableBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = cur().line;
        HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false));
        HEARTH_RETURN_IF_ERROR(expect(TokenType::kVariableEnd, "end of print statement"));
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (at_end_tag(end_tags)) return body;
        HEARTH_ASSIGN_OR_RETURN(StmtPtr s, parse_statement());
        body.push_back(std::move(s));
        HEARTH_RETURN_IF_ERROR(expect(TokenType::kBlockEnd, "end of statement block"));
      } else {
        return fail(fmt::format("unexpected '{}'", describe(t)));
      }
    }
    return body;
  }

  // Parses a body up to one of end_tags; leaves the matched tag name as the current token.
  Result<Body> parse_statements(const std::vector<std::string_view>& end_tags, bool drop_needle) {
    skip_op(":");
    HEARTH_RETURN_IF_ERROR(expect(TokenType::kBlockEnd, "end of statement block"));
    if (++depth_ > kMaxNesting) return fail("template nesting too deep");
    HEARTH_ASSIGN_OR_RETURN(Body body, subparse(end_tags));
    --depth_;
    if (cur().type == TokenType::kEof) {
      std::string expected;
      for (auto tag : end_tags)
        expected += fmt::format("{}'{}'", expected.empty() ? "" : " or ", tag);
      return fail(
          fmt::format("Unexpected end of template. Jinja was looking for the following "
                      "tags: {}.",
                      expected));
    }
    if (drop_needle) advance();
    return body;
  }

  StmtPtr stmt(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  Result<StmtPtr> parse_statement() {
    if (cur().type != TokenType::kName) return fail("tag name expected");
    std::string tag = cur().value;
    int line = cur().line;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "generation") {
      advance();
      auto s = stmt(Stmt::Kind::kScope, line);
      HEARTH_ASSIGN_OR_RETURN(s->body, parse_statements({"endgeneration"}, true));
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return fail(fmt::format("'{}' outside of a loop", tag));
      advance();
      return stmt(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line);
    }
    if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
        tag == "block") {
      return fail(
          fmt::format("'{}' is not supported: chat templates are rendered without files", tag));
    }
    return fail(fmt::format("Encountered unknown tag '{}'.", tag));
  }

  Result<StmtPtr> parse_if() {
    auto s = stmt(Stmt::Kind::kIf, cur().line);
    advance();
    while (true) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(false, false, {}, false));
      HEARTH_ASSIGN_OR_RETURN(Body body, parse_statements({"elif", "else", "endif"}, false));
      s->conditions.push_back(std::move(cond));
      s->bodies.push_back(std::move(body));
      std::string which = cur().value;
      advance();
      if (which == "elif") continue;
      if (which == "else") {
        HEARTH_ASSIGN_OR_RETURN(s->else_body, parse_statements({"endif"}, true));
      }
      break;
    }
    return s;
  }

  // `x`, `a, b` or (with_namespace) `ns.attr`.
  Result<Target> parse_target(bool with_namespace, std::vector<std::string_view> end_names) {
    Target target;
    while (true) {
      if (!target.names.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (cur().type == TokenType::kBlockEnd || is_op(")") || is_op("=")) break;
      bool at_end = false;
      for (auto n : end_names) at_end = at_end || is_name(n);
      if (at_end) break;
      HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
      if (name == "true" || name == "false" || name == "none" || name == "True" ||
          name == "False" || name == "None") {
        return fail("can't assign to 'const'");
      }
      if (with_namespace && is_op(".")) {
        advance();
        HEARTH_ASSIGN_OR_RETURN(target.attribute, expect_name());
      }
      target.names.push_back(name);
      if (!is_op(",")) break;
      target.is_tuple = true;
    }
    if (target.names.empty()) return fail("expected an assignment target");
    if (!target.attribute.empty() && target.names.size() > 1) {
      return fail("can't assign to a namespace attribute inside a tuple");
    }
    return target;
  }

  Result<StmtPtr> parse_for() {
    auto s = stmt(Stmt::Kind::kFor, cur().line);
    advance();
    HEARTH_ASSIGN_OR_RETURN(s->target, parse_target(false, {"in"}));
    if (!skip_name("in")) return fail("expected token 'in'");
    HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, false, {"recursive"}, false));
    if (skip_name("if")) {
      HEARTH_ASSIGN_OR_RETURN(s->condition, parse_expression(true));
    }
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_statements({"endfor", "else"}, false));
    --loop_depth_;
    bool has_else = cur().value == "else";
    advance();
    if (has_else) {
      HEARTH_ASSIGN_OR_RETURN(s->else_body, parse_statements({"endfor"}, true));
    }
    return s;
  }

  Result<StmtPtr> parse_set() {
    int line = cur().line;
    advance();
    HEARTH_ASSIGN_OR_RETURN(Target target, parse_target(true, {}));
    if (skip_op("=")) {
      auto s = stmt(Stmt::Kind::kSet, line);
      s->target = std::move(target);
      HEARTH_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false));
      return s;
    }
    auto s = stmt(Stmt::Kind::kSetBlock, line);
    if (target.is_tuple) return fail("can't assign a block to a tuple");
    s->target = std::move(target);
    if (is_op("|")) {
      HEARTH_ASSIGN_OR_RETURN(s->expr, parse_filter(nullptr, false));
    }
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_statements({"endset"}, true));
    return s;
  }

  Status parse_signature(std::vector<MacroParam>& params) {
    HEARTH_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
      if (!params.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      MacroParam p;
      HEARTH_ASSIGN_OR_RETURN(p.name, expect_name());
      if (skip_op("=")) {
        HEARTH_ASSIGN_OR_RETURN(p.default_value, parse_expression(true));
      } else if (!params.empty() && params.back().default_value) {
        return fail("non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    return expect_op(")");
  }

  Result<StmtPtr> parse_macro() {
    auto s = stmt(Stmt::Kind::kMacro, cur().line);
    advance();
    HEARTH_ASSIGN_OR_RETURN(s->name, expect_name());
    HEARTH_RETURN_IF_ERROR(parse_signature(s->params));
    int saved = loop_depth_;
    loop_depth_ = 0;
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_statements({"endmacro"}, true));
    loop_depth_ = saved;
    return s;
  }

  Result<StmtPtr> parse_call_block() {
    auto s = stmt(Stmt::Kind::kCallBlock, cur().line);
    advance();
    if (is_op("(")) HEARTH_RETURN_IF_ERROR(parse_signature(s->params));
    HEARTH_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
    if (s->expr->kind != Expr::Kind::kCall) return fail("expected call", s->line);
    int saved = loop_depth_;
    loop_depth_ = 0;
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_statements({"endcall"}, true));
    loop_depth_ = saved;
    return s;
  }

  Result<StmtPtr> parse_filter_block() {
    auto s = stmt(Stmt::Kind::kFilter, cur().line);
    advance();
    HEARTH_ASSIGN_OR_RETURN(s->expr, parse_filter(nullptr, true));
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_statements({"endfilter"}, true));
    return s;
  }

  Result<StmtPtr> parse_with() {
    auto s = stmt(Stmt::Kind::kWith, cur().line);
    advance();
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->with_targets.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
      HEARTH_RETURN_IF_ERROR(expect_op("="));
      HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      s->with_targets.push_back(std::move(name));
      s->with_values.push_back(std::move(value));
    }
    HEARTH_ASSIGN_OR_RETURN(s->body, parse_statements({"endwith"}, true));
    return s;
  }

  // ---- expressions ----

  bool is_tuple_end(const std::vector<std::string_view>& extra_end) const {
    if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd || is_op(")")) {
      return true;
    }
    for (auto n : extra_end) {
      if (is_name(n)) return true;
    }
    return false;
  }

  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr,
                              const std::vector<std::string_view>& extra_end,
                              bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      if (is_tuple_end(extra_end)) break;
      if (simplified) {
        HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_primary());
        items.push_back(std::move(e));
      } else {
        HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
        items.push_back(std::move(e));
      }
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) {
        return fail(fmt::format("Expected an expression, got '{}'", describe(cur())));
      }
    }
    auto e = node(Expr::Kind::kTuple, line);
    e->args = std::move(items);
    return e;
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    if (++depth_ > kMaxNesting) return fail("expression nesting too deep");
    auto r = with_condexpr ? parse_condexpr() : parse_or();
    --depth_;
    return r;
  }

  Result<ExprPtr> parse_condexpr() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
    while (skip_name("if")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
      ExprPtr else_expr;
      if (skip_name("else")) {
        HEARTH_ASSIGN_OR_RETURN(else_expr, parse_condexpr());
      }
      auto e = node(Expr::Kind::kCondition, line);
      e->args.push_back(std::move(expr1));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(else_expr));
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = node(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  Result<ExprPtr> parse_or() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
    while (skip_name("or")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
      left = binary("or", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> parse_and() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
    while (skip_name("and")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
      left = binary("and", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      int line = cur().line;
      advance();
      if (++depth_ > kMaxNesting) return fail("expression nesting too deep");
      HEARTH_ASSIGN_OR_RETURN(ExprPtr inner, parse_not());
      --depth_;
      auto e = node(Expr::Kind::kUnary, line);
      e->name = "not";
      e->args.push_back(std::move(inner));
      return e;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
           cur().value == "<=" || cur().value == ">=")) {
        op = cur().value;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && look().type == TokenType::kName && look().value == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Kind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      HEARTH_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(operand));
    }
    if (!cmp) return first;
    return cmp;
  }

  Result<ExprPtr> parse_math1() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
    while (is_op("+") || is_op("-")) {
      std::string op = cur().value;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
      left = binary(op, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> parse_concat() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_math2());
    while (skip_op("~")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_math2());
      left = binary("~", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> parse_math2() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().value;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
      left = binary(op, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> parse_pow() {
    int line = cur().line;
    HEARTH_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
    while (skip_op("**")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
      left = binary("**", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    if (++depth_ > kMaxNesting) return fail("expression nesting too deep");
    int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      std::string op = cur().value;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr inner, parse_unary(false));
      e = node(Expr::Kind::kUnary, line);
      e->name = op;
      e->args.push_back(std::move(inner));
    } else {
      HEARTH_ASSIGN_OR_RETURN(e, parse_primary());
    }
    HEARTH_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) {
      HEARTH_ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e)));
    }
    --depth_;
    return e;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = cur();
    int line = t.line;
    if (t.type == TokenType::kName) {
      std::string v = t.value;
      advance();
      auto e = node(Expr::Kind::kLiteral, line);
      if (v == "true" || v == "True" || v == "false" || v == "False") {
        e->literal = Value::boolean(v == "true" || v == "True");
      } else if (v == "none" || v == "None") {
        e->literal = Value::none();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = v;
      }
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().value;
        advance();
      }
      auto e = node(Expr::Kind::kLiteral, line);
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      auto e = node(Expr::Kind::kLiteral, line);
      e->literal = t.type == TokenType::kInteger ? Value::integer(t.int_value)
                                                 : Value::floating(t.float_value);
      advance();
      return e;
    }
    if (skip_op("(")) {
      HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(false, true, {}, true));
      HEARTH_RETURN_IF_ERROR(expect_op(")"));
      return e;
    }
    if (is_op("[") || is_op("{")) {
      bool is_list = is_op("[");
      std::string close = is_list ? "]" : "}";
      advance();
      auto e = node(is_list ? Expr::Kind::kList : Expr::Kind::kDict, line);
      bool first = true;
      while (!is_op(close)) {
        if (!first) HEARTH_RETURN_IF_ERROR(expect_op(","));
        first = false;
        if (is_op(close)) break;
        HEARTH_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
        e->args.push_back(std::move(item));
        if (!is_list) {
          HEARTH_RETURN_IF_ERROR(expect_op(":"));
          HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
          e->args.push_back(std::move(value));
        }
      }
      HEARTH_RETURN_IF_ERROR(expect_op(close));
      return e;
    }
    if (t.type == TokenType::kEof) return fail("unexpected end of template");
    return fail(fmt::format("unexpected '{}'", describe(t)));
  }

  Result<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
      } else if (is_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_filter(std::move(e), false));
      } else if (is_name("is")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_test(std::move(e)));
      } else if (is_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr subject) {
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == TokenType::kName) {
        auto e = node(Expr::Kind::kGetAttr, line);
        e->name = cur().value;
        e->args.push_back(std::move(subject));
        advance();
        return e;
      }
      if (cur().type != TokenType::kInteger) return fail("expected name or number");
      auto e = node(Expr::Kind::kGetItem, line);
      auto index = node(Expr::Kind::kLiteral, line);
      index->literal = Value::integer(cur().int_value);
      advance();
      e->args.push_back(std::move(subject));
      e->args.push_back(std::move(index));
      return e;
    }
    advance();  // '['
    std::vector<ExprPtr> items;
    while (!is_op("]")) {
      if (!items.empty()) HEARTH_RETURN_IF_ERROR(expect_op(","));
      HEARTH_ASSIGN_OR_RETURN(ExprPtr item, parse_subscribed());
      items.push_back(std::move(item));
    }
    HEARTH_RETURN_IF_ERROR(expect_op("]"));
    if (items.empty()) return fail("expected subscript expression", line);
    auto e = node(Expr::Kind::kGetItem, line);
    e->args.push_back(std::move(subject));
    if (items.size() == 1) {
      e->args.push_back(std::move(items[0]));
    } else {
      auto tuple = node(Expr::Kind::kTuple, line);
      tuple->args = std::move(items);
      e->args.push_back(std::move(tuple));
    }
    return e;
  }

  Result<ExprPtr> parse_subscribed() {
    int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      HEARTH_ASSIGN_OR_RETURN(start, parse_expression(true));
      if (!is_op(":")) return start;
    }
    advance();  // ':'
    auto slice = node(Expr::Kind::kSlice, line);
    slice->args.push_back(std::move(start));
    ExprPtr stop, step;
    if (!is_op(":") && !is_op("]") && !is_op(",")) {
      HEARTH_ASSIGN_OR_RETURN(stop, parse_expression(true));
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) {
        HEARTH_ASSIGN_OR_RETURN(step, parse_expression(true));
      }
    }
    slice->args.push_back(std::move(stop));
    slice->args.push_back(std::move(step));
    return slice;
  }

  Status parse_call_args(Expr::CallSite& call) {
    int line = cur().line;
    HEARTH_RETURN_IF_ERROR(expect_op("("));
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        HEARTH_RETURN_IF_ERROR(expect_op(","));
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        if (call.star_args || call.star_kwargs) {
          return fail("invalid syntax for function call expression", line);
        }
        HEARTH_ASSIGN_OR_RETURN(call.star_args, parse_expression(true));
      } else if (skip_op("**")) {
        if (call.star_kwargs) return fail("invalid syntax for function call expression", line);
        HEARTH_ASSIGN_OR_RETURN(call.star_kwargs, parse_expression(true));
      } else if (cur().type == TokenType::kName && look().type == TokenType::kOperator &&
                 look().value == "=") {
        if (call.star_kwargs) return fail("invalid syntax for function call expression", line);
        std::string key = cur().value;
        advance();
        advance();
        HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        call.keyword.emplace_back(std::move(key), std::move(value));
      } else {
        if (call.star_args || call.star_kwargs || !call.keyword.empty()) {
          return fail("invalid syntax for function call expression", line);
        }
        HEARTH_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        call.positional.push_back(std::move(value));
      }
      require_comma = true;
    }
    return expect_op(")");
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    auto e = node(Expr::Kind::kCall, cur().line);
    e->args.push_back(std::move(callee));
    HEARTH_RETURN_IF_ERROR(parse_call_args(e->call));
    return e;
  }

  Result<std::string> dotted_name() {
    HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      HEARTH_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    return name;
  }

  // `| name(args)` chains; subject null means "the block's content" (filter blocks, set blocks).
  Result<ExprPtr> parse_filter(ExprPtr subject, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      auto e = node(Expr::Kind::kFilter, cur().line);
      HEARTH_ASSIGN_OR_RETURN(e->name, dotted_name());
      if (is_op("(")) HEARTH_RETURN_IF_ERROR(parse_call_args(e->call));
      e->args.push_back(std::move(subject));
      subject = std::move(e);
    }
    return subject;
  }

  Result<ExprPtr> parse_test(ExprPtr subject) {
    auto e = node(Expr::Kind::kTest, cur().line);
    advance();  // 'is'
    e->negated = skip_name("not");
    HEARTH_ASSIGN_OR_RETURN(e->name, dotted_name());
    e->args.push_back(std::move(subject));
    if (is_op("(")) {
      HEARTH_RETURN_IF_ERROR(parse_call_args(e->call));
    } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString ||
                cur().type == TokenType::kInteger || cur().type == TokenType::kFloat ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) return fail("You cannot chain multiple tests with is");
      HEARTH_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      HEARTH_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      e->call.positional.push_back(std::move(arg));
    }
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Body> parse(std::vector<Token> tokens) {
  Parser parser(std::move(tokens));
  return parser.parse_template();
}

}  // namespace hearth::text::jinja
