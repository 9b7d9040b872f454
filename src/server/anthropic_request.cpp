// Parsing of Anthropic /v1/messages bodies into the OpenAI-shaped messages chat templates
// expect: system first, tool_use -> assistant tool_calls, tool_result -> role "tool",
// thinking -> reasoning_content. Ranges as Anthropic's API: temperature 0..1, max_tokens >= 1.
#include <fmt/format.h>

#include <limits>

#include "server/generation_request.h"
#include "server/json_body.h"

namespace hearth::server {
namespace {

using nlohmann::json;

std::string text_of_blocks(const json& value, const std::string& field) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) {
    throw_invalid(fmt::format("{}: expected a string or an array of content blocks", field), field);
  }
  std::string text;
  for (std::size_t i = 0; i < value.size(); ++i) {
    std::string bf = fmt::format("{}.{}", field, i);
    const json& b = value[i];
    if (!b.is_object()) throw_invalid(fmt::format("{}: expected an object", bf), bf);
    FieldReader br(b, bf + ".");
    std::string type = br.string("type").value_or("");
    if (type != "text") {
      throw_invalid(fmt::format("{}.type: '{}' is not supported here (text only)", bf, type),
                    bf + ".type");
    }
    auto t = br.string("text");
    if (!t) throw_invalid(fmt::format("{}.text: Field required", bf), bf + ".text");
    if (!text.empty()) text += "\n";
    text += *t;
  }
  return text;
}

}  // namespace

GenerationRequest parse_messages(const json& body) {
  FieldReader f(body);
  GenerationRequest r;
  r.api = ApiKind::kMessages;
  r.model = f.string("model").value_or("");
  auto max_tokens = f.integer("max_tokens", 1, std::numeric_limits<int32_t>::max());
  if (!max_tokens) throw_invalid("max_tokens: Field required", "max_tokens");
  r.max_tokens = static_cast<int>(*max_tokens);
  if (auto v = f.number("temperature", 0, 1)) {
    r.sampling.temperature = static_cast<float>(*v);
    r.temperature_set = true;
  }
  if (auto v = f.number("top_p", 0, 1)) {
    r.sampling.top_p = static_cast<float>(*v);
    r.top_p_set = true;
  }
  if (auto v = f.integer("top_k", 0, std::numeric_limits<int32_t>::max())) {
    r.sampling.top_k = static_cast<int>(*v);
    r.top_k_set = true;
  }
  if (auto v = f.boolean("stream")) r.stream = *v;
  r.include_usage = true;
  if (const json* stops = f.array("stop_sequences")) {
    for (std::size_t i = 0; i < stops->size(); ++i) {
      if (!(*stops)[i].is_string()) {
        throw_invalid(fmt::format("stop_sequences.{}: Input should be a valid string", i),
                      "stop_sequences");
      }
      r.stop.push_back((*stops)[i].get<std::string>());
    }
  }
  if (const json* thinking = f.object("thinking")) {
    FieldReader tr(*thinking, "thinking.");
    std::string type = tr.string("type").value_or("");
    if (type == "enabled") {
      r.enable_thinking = true;
      tr.integer("budget_tokens", 1, std::numeric_limits<int32_t>::max());
    } else if (type == "disabled") {
      r.enable_thinking = false;
    } else {
      throw_invalid("thinking.type: Input should be 'enabled' or 'disabled'", "thinking.type");
    }
  }

  json messages = json::array();
  if (const json* system = f.get("system")) {
    messages.push_back({{"role", "system"}, {"content", text_of_blocks(*system, "system")}});
  }
  const json* in = f.array("messages");
  if (!in) throw_invalid("messages: Field required", "messages");
  if (in->empty()) throw_invalid("messages: at least one message is required", "messages");
  for (std::size_t i = 0; i < in->size(); ++i) {
    std::string mf = fmt::format("messages.{}", i);
    const json& m = (*in)[i];
    if (!m.is_object()) throw_invalid(fmt::format("{}: Input should be an object", mf), mf);
    FieldReader mr(m, mf + ".");
    auto role = mr.string("role");
    if (!role || (*role != "user" && *role != "assistant")) {
      throw_invalid(fmt::format("{}.role: Input should be 'user' or 'assistant'", mf),
                    mf + ".role");
    }
    const json* content = mr.get("content");
    if (!content) throw_invalid(fmt::format("{}.content: Field required", mf), mf + ".content");
    if (content->is_string()) {
      messages.push_back({{"role", *role}, {"content", *content}});
      continue;
    }
    if (!content->is_array()) {
      throw_invalid(fmt::format("{}.content: Input should be a valid string or list", mf),
                    mf + ".content");
    }
    std::string text;
    std::string reasoning;
    json calls = json::array();
    std::vector<json> tool_results;
    for (std::size_t k = 0; k < content->size(); ++k) {
      std::string bf = fmt::format("{}.content.{}", mf, k);
      const json& b = (*content)[k];
      if (!b.is_object()) throw_invalid(fmt::format("{}: Input should be an object", bf), bf);
      FieldReader br(b, bf + ".");
      std::string type = br.string("type").value_or("");
      if (type == "text") {
        auto t = br.string("text");
        if (!t) throw_invalid(fmt::format("{}.text: Field required", bf), bf + ".text");
        text += *t;
      } else if (type == "thinking" || type == "redacted_thinking") {
        if (auto t = br.string("thinking")) reasoning += *t;
      } else if (type == "tool_use") {
        if (*role != "assistant") {
          throw_invalid(fmt::format("{}: tool_use blocks belong to assistant messages", bf), bf);
        }
        auto id = br.string("id");
        auto name = br.string("name");
        if (!id || !name) throw_invalid(fmt::format("{}: tool_use needs 'id' and 'name'", bf), bf);
        const json* input = br.object("input");
        calls.push_back(
            {{"id", *id},
             {"type", "function"},
             {"function", {{"name", *name}, {"arguments", input ? *input : json::object()}}}});
      } else if (type == "tool_result") {
        auto id = br.string("tool_use_id");
        if (!id) {
          throw_invalid(fmt::format("{}.tool_use_id: Field required", bf), bf + ".tool_use_id");
        }
        const json* c = br.get("content");
        std::string result = c ? text_of_blocks(*c, bf + ".content") : "";
        if (br.boolean("is_error").value_or(false)) result = "Error: " + result;
        tool_results.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
      } else if (type == "image" || type == "document") {
        throw_invalid(fmt::format("{}.type: '{}' blocks are not supported by the loaded model "
                                  "(text only)",
                                  bf, type),
                      bf + ".type");
      } else {
        throw_invalid(fmt::format("{}.type: unknown content block type '{}'", bf, type),
                      bf + ".type");
      }
    }
    for (auto& t : tool_results) messages.push_back(std::move(t));
    if (!text.empty() || !calls.empty() || !reasoning.empty() || tool_results.empty()) {
      json msg = {{"role", *role}, {"content", text}};
      if (!calls.empty()) msg["tool_calls"] = calls;
      if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
      messages.push_back(std::move(msg));
    }
  }
  r.messages = std::move(messages);

  if (const json* tools = f.array("tools"); tools && !tools->empty()) {
    json converted = json::array();
    for (std::size_t i = 0; i < tools->size(); ++i) {
      std::string tf = fmt::format("tools.{}", i);
      const json& t = (*tools)[i];
      if (!t.is_object()) throw_invalid(fmt::format("{}: Input should be an object", tf), tf);
      FieldReader tr(t, tf + ".");
      auto name = tr.string("name");
      if (!name || name->empty())
        throw_invalid(fmt::format("{}.name: Field required", tf), tf + ".name");
      json fn = {{"name", *name}};
      if (auto d = tr.string("description")) fn["description"] = *d;
      const json* schema = tr.object("input_schema");
      fn["parameters"] = schema ? *schema : json{{"type", "object"}};
      converted.push_back({{"type", "function"}, {"function", fn}});
    }
    r.tools = converted;
  }
  if (const json* tc = f.object("tool_choice")) {
    FieldReader tr(*tc, "tool_choice.");
    std::string type = tr.string("type").value_or("auto");
    if (type == "auto") {
      r.tool_choice = ToolChoice::kAuto;
    } else if (type == "any") {
      r.tool_choice = ToolChoice::kRequired;
    } else if (type == "none") {
      r.tool_choice = ToolChoice::kNone;
    } else if (type == "tool") {
      auto name = tr.string("name");
      if (!name) throw_invalid("tool_choice.name: Field required", "tool_choice.name");
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = *name;
    } else {
      throw_invalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
                    "tool_choice.type");
    }
  }
  return r;
}

}  // namespace hearth::server
