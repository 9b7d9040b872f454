// The public face of the Jinja interpreter: parse a template once, render it many times with
// different variables. Configured as transformers configures jinja2 for chat templates
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, its tojson,
// raise_exception and strftime_now).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace hearth::text::jinja {

class Template {
 public:
  // Syntax errors name the line: "line 3: Encountered unknown tag 'foo'."
  static Result<Template> parse(std::string_view source, RenderLimits limits = {});

  // `variables` is a dict of the template's top-level names. Errors name the template line.
  Result<std::string> render(const DictData& variables) const;

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
  std::shared_ptr<const Environment> env_;
  RenderLimits limits_;
};

}  // namespace hearth::text::jinja
