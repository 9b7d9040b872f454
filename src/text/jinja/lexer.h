// Template source -> tokens, following Jinja2's lexer: data between tags with whitespace
// control (`-`, `+`, trim_blocks, lstrip_blocks) already applied, raw blocks turned into data,
// comments dropped, and the tokens inside `{{ }}` / `{% %}` for the parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace hearth::text::jinja {

enum class TokenType : uint8_t {
  kData,
  kBlockBegin,
  kBlockEnd,
  kVariableBegin,
  kVariableEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;  // data text, name, unescaped string, operator spelling
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexerOptions {
  bool trim_blocks = true;  // transformers sets both
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Errors name the line: "line 3: unexpected end of template, expected '%}'".
Result<std::vector<Token>> tokenize(std::string_view source, const LexerOptions& options);

}  // namespace hearth::text::jinja
