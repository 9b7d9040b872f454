// `hearth template --model <dir> --messages <file.json>`: render a model's chat template the
// way transformers' apply_chat_template(tokenize=False) does, and print the prompt exactly.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/verb.h"
#include "text/chat_template.h"

namespace hearth::cli {
namespace {

struct TemplateArgs {
  std::string model;
  std::string messages;
  std::string tools;
  std::string kwargs;
  bool no_generation_prompt = false;
};

Result<nlohmann::ordered_json> read_json_arg(const std::string& path, const char* what) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return not_found_error("cannot open {} file '{}'", what, path);
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) return parse_error("{} file '{}' is not valid JSON", what, path);
  return j;
}

int fail(const Status& st) {
  std::fprintf(stderr, "hearth template: %s\n", st.message().c_str());
  return kExitFailure;
}

int run_template(const TemplateArgs& args) {
  auto tmpl = text::ChatTemplate::load(args.model);
  if (!tmpl.ok()) return fail(tmpl.status());
  auto messages = read_json_arg(args.messages, "messages");
  if (!messages.ok()) return fail(messages.status());
  // A file may hold the array itself or a request body with a "messages" field.
  nlohmann::ordered_json msgs = *messages;
  if (msgs.is_object() && msgs.contains("messages")) msgs = msgs["messages"];
  nlohmann::ordered_json tools = nullptr;
  if (!args.tools.empty()) {
    auto t = read_json_arg(args.tools, "tools");
    if (!t.ok()) return fail(t.status());
    tools = *t;
  }
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (!args.kwargs.empty()) {
    kwargs = nlohmann::ordered_json::parse(args.kwargs, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object()) {
      std::fprintf(stderr, "hearth template: --kwargs must be a JSON object\n");
      return kExitUsage;
    }
  }
  auto prompt = tmpl->render(msgs, tools, !args.no_generation_prompt, kwargs);
  if (!prompt.ok()) return fail(prompt.status());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

Verb add_template_verb(CLI::App& app) {
  auto args = std::make_shared<TemplateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "template", "Render a model's chat template for a conversation and print the prompt");
  cmd->add_option("--model", args->model,
                  "Model directory (chat_template.jinja or tokenizer_config.json)")
      ->required();
  cmd->add_option("--messages", args->messages,
                  "JSON file: an array of messages, or an object with \"messages\" ('-' = stdin)")
      ->required();
  cmd->add_option("--tools", args->tools, "JSON file: an array of tool (function) schemas");
  cmd->add_option("--kwargs", args->kwargs,
                  "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  cmd->add_flag("--no-generation-prompt", args->no_generation_prompt,
                "Do not open an assistant turn at the end (add_generation_prompt=false)");
  return {cmd, [args] { return run_template(*args); }};
}

}  // namespace hearth::cli
