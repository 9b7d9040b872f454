// Loading chat templates and special tokens from a model directory, and the variables
// transformers passes to the template.
#include "text/chat_template.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace hearth::text {
namespace {

constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<nlohmann::ordered_json> read_json(const std::filesystem::path& path) {
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) return parse_error("{} is not valid JSON", path.string());
  return j;
}

// A special token is a string or an AddedToken dict ({"content": ..., ...}).
std::optional<std::string> token_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

// Defaults a tokenizer class's constructor fills in for special tokens its config leaves out
// (a key present with null stays unset). transformers' special_tokens_map shows them.
struct ClassDefaults {
  std::string_view tokenizer_class;
  std::string_view key;
  std::string_view value;
};
constexpr ClassDefaults kClassDefaults[] = {
    {"GemmaTokenizer", "unk_token", "<unk>"},
    {"GemmaTokenizer", "bos_token", "<bos>"},
    {"GemmaTokenizer", "eos_token", "<eos>"},
    {"GemmaTokenizer", "pad_token", "<pad>"},
    {"GemmaTokenizer", "mask_token", "<mask>"},
    {"LlamaTokenizer", "unk_token", "<unk>"},
    {"LlamaTokenizer", "bos_token", "<s>"},
    {"LlamaTokenizer", "eos_token", "</s>"},
    {"Qwen2Tokenizer", "unk_token", "<|endoftext|>"},
    {"Qwen2Tokenizer", "eos_token", "<|endoftext|>"},
    {"Qwen2Tokenizer", "pad_token", "<|endoftext|>"},
};

// special_tokens_map as transformers 5 builds it: the standard keys plus the model-specific
// ones named in extra_special_tokens (e.g. Gemma 3's image_token); additional_special_tokens
// is not a template variable.
void collect_special_tokens(const nlohmann::ordered_json& config, jinja::DictData& out) {
  if (!config.is_object()) return;
  std::string cls = config.contains("tokenizer_class") && config["tokenizer_class"].is_string()
                        ? config["tokenizer_class"].get<std::string>()
                        : "";
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  for (const char* key : kSpecialTokenKeys) {
    if (config.contains(key)) {
      if (auto text = token_text(config[key])) {
        out.set(jinja::Value::string(key), jinja::Value::string(*text));
      }
      continue;
    }
    for (const auto& d : kClassDefaults) {
      if (d.tokenizer_class == cls && d.key == key && out.find(std::string_view(key)) == nullptr) {
        out.set(jinja::Value::string(key), jinja::Value::string(std::string(d.value)));
      }
    }
  }
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object()) {
    for (const auto& [key, value] : config["extra_special_tokens"].items()) {
      if (auto text = token_text(value)) {
        out.set(jinja::Value::string(key), jinja::Value::string(*text));
      }
    }
  }
}

}  // namespace

jinja::Value json_to_value(const nlohmann::ordered_json& j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(json_to_value(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::DictData d;
      d.entries.reserve(j.size());
      for (const auto& [k, v] : j.items()) {
        d.entries.emplace_back(Value::string(k), json_to_value(v));
      }
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

Result<ChatTemplate> ChatTemplate::from_config(const nlohmann::ordered_json& tokenizer_config,
                                               const std::string& jinja_source) {
  ChatTemplate ct;
  auto add = [&ct](std::string name, std::string source) -> Status {
    auto compiled = jinja::Template::parse(source);
    if (!compiled.ok()) {
      return compiled.status().with_context(name.empty() ? "chat template"
                                                         : fmt::format("chat template '{}'", name));
    }
    ct.templates_.push_back(Named{std::move(name), std::move(source), std::move(compiled).value()});
    return ok_status();
  };
  const nlohmann::ordered_json* spec = nullptr;
  if (tokenizer_config.is_object() && tokenizer_config.contains("chat_template")) {
    spec = &tokenizer_config["chat_template"];
  }
  if (!jinja_source.empty()) {
    HEARTH_RETURN_IF_ERROR(add("", jinja_source));
  } else if (spec != nullptr && spec->is_string()) {
    HEARTH_RETURN_IF_ERROR(add("", spec->get<std::string>()));
  } else if (spec != nullptr && spec->is_array()) {
    ct.named_ = true;
    for (const auto& entry : *spec) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string()) {
        return parse_error(
            "chat_template list entries must be {{\"name\": ..., \"template\": ...}}");
      }
      HEARTH_RETURN_IF_ERROR(
          add(entry["name"].get<std::string>(), entry["template"].get<std::string>()));
    }
  } else if (spec != nullptr && !spec->is_null()) {
    return parse_error("chat_template must be a string or a list of named templates");
  }
  if (ct.templates_.empty()) {
    return not_found_error(
        "this model has no chat template (no chat_template.jinja and no chat_template in "
        "tokenizer_config.json)");
  }
  collect_special_tokens(tokenizer_config, ct.special_tokens_);
  return ct;
}

Result<ChatTemplate> ChatTemplate::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path dir(model_dir);
  if (!fs::is_directory(dir))
    return not_found_error("model directory {} does not exist", model_dir);
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (fs::exists(dir / "tokenizer_config.json")) {
    HEARTH_ASSIGN_OR_RETURN(config, read_json(dir / "tokenizer_config.json"));
  }
  std::string jinja_source;
  if (fs::exists(dir / "chat_template.jinja")) {
    HEARTH_ASSIGN_OR_RETURN(jinja_source, read_file(dir / "chat_template.jinja"));
  }
  HEARTH_ASSIGN_OR_RETURN(ChatTemplate ct, from_config(config, jinja_source));
  if (fs::exists(dir / "special_tokens_map.json")) {
    HEARTH_ASSIGN_OR_RETURN(auto map, read_json(dir / "special_tokens_map.json"));
    collect_special_tokens(map, ct.special_tokens_);
  }
  return ct;
}

const ChatTemplate::Named* ChatTemplate::pick(bool with_tools) const {
  if (!named_) return &templates_.front();
  const Named* fallback = nullptr;
  for (const Named& t : templates_) {
    if (with_tools && t.name == "tool_use") return &t;
    if (t.name == "default") fallback = &t;
  }
  return fallback;
}

const std::string& ChatTemplate::source(bool with_tools) const {
  static const std::string kNone;
  const Named* t = pick(with_tools);
  return t != nullptr ? t->source : kNone;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json& kwargs) const {
  if (!messages.is_array()) return invalid_argument_error("messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) {
    return invalid_argument_error("tools must be null or a JSON array");
  }
  if (!kwargs.is_null() && !kwargs.is_object()) {
    return invalid_argument_error("template kwargs must be a JSON object");
  }
  const Named* t = pick(!tools.is_null());
  if (t == nullptr) {
    return not_found_error(
        "this model's chat templates include no 'default' template (and tools select "
        "'tool_use' only when given)");
  }
  using jinja::Value;
  jinja::DictData vars = special_tokens_;
  if (kwargs.is_object()) {
    for (const auto& [k, v] : kwargs.items()) {
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt") {
        return invalid_argument_error("template kwargs cannot set '{}'", k);
      }
      vars.set(Value::string(k), json_to_value(v));
    }
  }
  vars.set(Value::string("messages"), json_to_value(messages));
  vars.set(Value::string("tools"), json_to_value(tools));
  vars.set(Value::string("documents"), Value::none());
  vars.set(Value::string("add_generation_prompt"), Value::boolean(add_generation_prompt));
  auto out = t->compiled.render(vars);
  if (!out.ok()) return out.status().with_context("chat template");
  return out;
}

Result<std::string> ChatTemplate::render(const nlohmann::json& messages,
                                         const nlohmann::json& tools, bool add_generation_prompt,
                                         const nlohmann::json& kwargs) const {
  auto convert = [](const nlohmann::json& j) { return nlohmann::ordered_json::parse(j.dump()); };
  return render(convert(messages), convert(tools), add_generation_prompt, convert(kwargs));
}

}  // namespace hearth::text
