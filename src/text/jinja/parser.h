// Tokens -> AST, following the grammar of Jinja2's parser (operator precedence, implicit
// tuples, filters and tests after postfix expressions, the statements chat templates use).
// Tags that need files or the outside world (extends, include, import) are syntax errors here.
#pragma once

#include <vector>

#include "base/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace hearth::text::jinja {

// Errors name the line: "line 4: Encountered unknown tag 'endfor'".
Result<Body> parse(std::vector<Token> tokens);

}  // namespace hearth::text::jinja
