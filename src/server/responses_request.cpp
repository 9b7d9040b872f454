// Parsing of OpenAI /v1/responses bodies: `instructions` + `input` (a string or items:
// messages, function_call, function_call_output, reasoning) into chat messages. The server
// keeps no response store, so previous_response_id is refused rather than ignored.
#include <fmt/format.h>

#include <limits>

#include "server/generation_request.h"
#include "server/json_body.h"

namespace hearth::server {
namespace {

using nlohmann::json;

std::string content_text(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw_invalid(fmt::format("Invalid type for '{}': expected a string or an array, but got {} "
                              "instead.",
                              field, json_type_name(content)),
                  field);
  }
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    std::string pf = fmt::format("{}[{}]", field, i);
    const json& p = content[i];
    if (!p.is_object())
      throw_invalid(fmt::format("Invalid type for '{}': expected an object.", pf), pf);
    FieldReader pr(p, pf + ".");
    std::string type = pr.string("type").value_or("");
    if (type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" ||
        type == "reasoning_text") {
      if (!text.empty()) text += "\n";
      text += pr.string("text").value_or("");
    } else if (type == "refusal") {
      text += pr.string("refusal").value_or("");
    } else {
      throw_invalid(
          fmt::format("Invalid value for '{}.type': '{}' is not supported (text only).", pf, type),
          pf + ".type");
    }
  }
  return text;
}

}  // namespace

GenerationRequest parse_responses(const json& body) {
  FieldReader f(body);
  GenerationRequest r;
  r.api = ApiKind::kResponses;
  r.model = f.string("model").value_or("");
  if (f.has("previous_response_id")) {
    throw_invalid(
        "'previous_response_id' is not supported: this server stores no responses; "
        "send the whole conversation in 'input'.",
        "previous_response_id");
  }
  if (auto v = f.number("temperature", 0, 2)) {
    r.sampling.temperature = static_cast<float>(*v);
    r.temperature_set = true;
  }
  if (auto v = f.number("top_p", 0, 1)) {
    r.sampling.top_p = static_cast<float>(*v);
    r.top_p_set = true;
  }
  if (auto v = f.integer("max_output_tokens", 1, std::numeric_limits<int32_t>::max())) {
    r.max_tokens = static_cast<int>(*v);
  }
  if (auto v = f.boolean("stream")) r.stream = *v;
  r.include_usage = true;
  if (const json* reasoning = f.object("reasoning")) {
    FieldReader rr(*reasoning, "reasoning.");
    if (auto effort = rr.string("effort")) {
      if (*effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" &&
          *effort != "high") {
        throw_invalid(fmt::format("Invalid value for 'reasoning.effort': '{}'. Supported values "
                                  "are: 'none', 'minimal', 'low', 'medium' and 'high'.",
                                  *effort),
                      "reasoning.effort");
      }
      r.enable_thinking = *effort != "none" && *effort != "minimal";
    }
  }
  if (const json* text = f.object("text")) {
    if (const json* format = FieldReader(*text, "text.").object("format")) {
      std::string type = FieldReader(*format, "text.format.").string("type").value_or("text");
      if (type != "text") {
        throw_invalid(fmt::format("text.format type '{}' is not supported by this server yet "
                                  "(no constrained decoding); use 'text'",
                                  type),
                      "text.format.type");
      }
    }
  }

  json messages = json::array();
  if (auto instructions = f.string("instructions")) {
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  const json* input = f.get("input");
  if (!input) throw_invalid("Missing required parameter: 'input'.", "input");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    std::string pending_reasoning;
    for (std::size_t i = 0; i < input->size(); ++i) {
      std::string itf = fmt::format("input[{}]", i);
      const json& item = (*input)[i];
      if (!item.is_object()) {
        throw_invalid(fmt::format("Invalid type for '{}': expected an object.", itf), itf);
      }
      FieldReader ir(item, itf + ".");
      std::string type = ir.string("type").value_or("message");
      if (type == "message") {
        auto role = ir.string("role");
        if (!role)
          throw_invalid(fmt::format("Missing required parameter: '{}.role'.", itf), itf + ".role");
        std::string rl = *role == "developer" ? "system" : *role;
        if (rl != "system" && rl != "user" && rl != "assistant") {
          throw_invalid(fmt::format("Invalid value for '{}.role': '{}'.", itf, *role),
                        itf + ".role");
        }
        const json* c = ir.get("content");
        json msg = {{"role", rl},
                    {"content", c ? content_text(*c, itf + ".content") : std::string()}};
        if (rl == "assistant" && !pending_reasoning.empty()) {
          msg["reasoning_content"] = pending_reasoning;
          pending_reasoning.clear();
        }
        messages.push_back(std::move(msg));
      } else if (type == "function_call") {
        auto name = ir.string("name");
        auto call_id = ir.string("call_id");
        if (!name || !call_id) {
          throw_invalid(fmt::format("'{}': function_call items need 'name' and 'call_id'.", itf),
                        itf);
        }
        std::string args_text = ir.string("arguments").value_or("{}");
        json args = json::parse(args_text, nullptr, false);
        json call = {
            {"id", *call_id},
            {"type", "function"},
            {"function",
             {{"name", *name}, {"arguments", args.is_discarded() ? json(args_text) : args}}}};
        // Consecutive calls belong to one assistant turn.
        if (!messages.empty() && messages.back()["role"] == "assistant" &&
            messages.back().contains("tool_calls")) {
          messages.back()["tool_calls"].push_back(call);
        } else {
          json msg = {{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({call})}};
          if (!pending_reasoning.empty()) {
            msg["reasoning_content"] = pending_reasoning;
            pending_reasoning.clear();
          }
          messages.push_back(std::move(msg));
        }
      } else if (type == "function_call_output") {
        auto call_id = ir.string("call_id");
        if (!call_id)
          throw_invalid(fmt::format("Missing required parameter: '{}.call_id'.", itf),
                        itf + ".call_id");
        const json* out = ir.get("output");
        std::string text =
            out ? (out->is_string() ? out->get<std::string>() : content_text(*out, itf + ".output"))
                : "";
        messages.push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}});
      } else if (type == "reasoning") {
        if (const json* c = ir.array("content"))
          pending_reasoning += content_text(*c, itf + ".content");
        else if (const json* s = ir.array("summary"))
          pending_reasoning += content_text(*s, itf + ".summary");
      } else {
        throw_invalid(fmt::format("Invalid value for '{}.type': '{}' is not supported.", itf, type),
                      itf + ".type");
      }
    }
  } else {
    f.type_error("input", "a string or an array");
  }
  if (messages.empty()) throw_invalid("Invalid 'input': no messages.", "input");
  r.messages = std::move(messages);

  if (const json* tools = f.get("tools")) {
    r.tools = parse_openai_tools(*tools, "tools");
    if (r.tools.empty()) r.tools = nullptr;
  }
  if (const json* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      std::string v = tc->get<std::string>();
      if (v == "none") {
        r.tool_choice = ToolChoice::kNone;
      } else if (v == "required") {
        r.tool_choice = ToolChoice::kRequired;
      } else if (v != "auto") {
        throw_invalid(fmt::format("Invalid value for 'tool_choice': '{}'.", v), "tool_choice");
      }
    } else if (tc->is_object()) {
      auto name = FieldReader(*tc, "tool_choice.").string("name");
      if (!name)
        throw_invalid("Missing required parameter: 'tool_choice.name'.", "tool_choice.name");
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = *name;
    } else {
      f.type_error("tool_choice", "a string or an object");
    }
  }
  return r;
}

}  // namespace hearth::server
