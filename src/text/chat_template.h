// A model's chat template, rendered exactly as transformers' apply_chat_template(tokenize=False)
// renders it: the template comes from chat_template.jinja or tokenizer_config.json (a string,
// or named templates where "tool_use" wins when tools are given and "default" otherwise), and
// the special tokens (bos_token, eos_token, ...) are template variables beside messages, tools,
// documents, add_generation_prompt and the caller's kwargs (enable_thinking, ...).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "text/jinja/template.h"

namespace hearth::text {

class ChatTemplate {
 public:
  // Reads <model_dir>/chat_template.jinja if present, else tokenizer_config.json's
  // chat_template; special tokens from tokenizer_config.json, overridden by
  // special_tokens_map.json as transformers does.
  static Result<ChatTemplate> load(const std::string& model_dir);

  // From an already-parsed tokenizer_config.json; `jinja_source` (chat_template.jinja's text),
  // when non-empty, replaces the config's chat_template.
  static Result<ChatTemplate> from_config(const nlohmann::ordered_json& tokenizer_config,
                                          const std::string& jinja_source = "");

  // messages: array of {role, content: string | [parts], ...}; tools: null or an array of
  // JSON schemas; kwargs: object of extra template variables. Object key order is kept, so
  // pass ordered_json to reproduce tool schemas key for key; the nlohmann::json overload sees
  // keys sorted, as that type stores them.
  Result<std::string> render(const nlohmann::ordered_json& messages,
                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                             const nlohmann::ordered_json& kwargs) const;
  Result<std::string> render(const nlohmann::json& messages, const nlohmann::json& tools,
                             bool add_generation_prompt, const nlohmann::json& kwargs) const;

  // The template source render() would use (with or without tools).
  const std::string& source(bool with_tools) const;

 private:
  struct Named {
    std::string name;
    std::string source;
    jinja::Template compiled;
  };
  const Named* pick(bool with_tools) const;

  std::vector<Named> templates_;  // one unnamed entry, or the named set
  bool named_ = false;
  jinja::DictData special_tokens_;
};

// JSON -> template value (objects keep their key order).
jinja::Value json_to_value(const nlohmann::ordered_json& j);

}  // namespace hearth::text
