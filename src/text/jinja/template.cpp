// Template: lexer + parser at construction, a fresh Interpreter per render (renders may run on
// several threads at once; the parsed tree and the environment are shared read-only).
#include "text/jinja/template.h"

#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace hearth::text::jinja {

struct Template::Parsed {
  Body body;
};

Result<Template> Template::parse(std::string_view source, RenderLimits limits) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source, LexerOptions{}));
  HEARTH_ASSIGN_OR_RETURN(Body body, jinja::parse(std::move(tokens)));
  Template t;
  auto parsed = std::make_shared<Parsed>();
  parsed->body = std::move(body);
  t.parsed_ = std::move(parsed);
  t.env_ = Environment::make_default();
  t.limits_ = limits;
  return t;
}

Result<std::string> Template::render(const DictData& variables) const {
  Interpreter interpreter(env_, limits_);
  return interpreter.render(parsed_->body, variables);
}

}  // namespace hearth::text::jinja
