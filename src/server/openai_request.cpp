// Parsing of OpenAI /v1/chat/completions and /v1/completions bodies, with OpenAI's own
// ranges (temperature 0..2, top_p 0..1, n 1..128, penalties -2..2, top_logprobs 0..20).
#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "server/generation_request.h"
#include "server/json_body.h"

namespace hearth::server {
namespace {

using nlohmann::json;

constexpr int kMaxStops = 16;
constexpr int64_t kMaxTokensCap = std::numeric_limits<int32_t>::max();

// Sampling fields shared by both OpenAI routes (and the vLLM-style extras).
void parse_sampling(const FieldReader& f, GenerationRequest& r) {
  auto& s = r.sampling;
  if (auto v = f.number("temperature", 0, 2)) {
    s.temperature = static_cast<float>(*v);
    r.temperature_set = true;
  }
  if (auto v = f.number("top_p", 0, 1)) {
    s.top_p = static_cast<float>(*v);
    r.top_p_set = true;
  }
  if (auto v = f.integer("top_k", -1, std::numeric_limits<int32_t>::max())) {
    s.top_k = *v < 0 ? 0 : static_cast<int>(*v);
    r.top_k_set = true;
  }
  if (auto v = f.number("min_p", 0, 1)) s.min_p = static_cast<float>(*v);
  if (auto v = f.number("xtc_probability", 0, 1)) s.xtc_probability = static_cast<float>(*v);
  if (auto v = f.number("xtc_threshold", 0, 1)) s.xtc_threshold = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 1e-6, 1e6)) {
    s.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*v);
  }
  if (auto v = f.boolean("ignore_eos")) s.ignore_eos = *v;
  if (const json* bias = f.object("logit_bias")) {
    for (const auto& [key, value] : bias->items()) {
      std::string name = f.name("logit_bias") + "." + key;
      int64_t id = 0;
      auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || ptr != key.data() + key.size() || id < 0 ||
          id > std::numeric_limits<int32_t>::max()) {
        throw_invalid(
            fmt::format("Invalid '{}': keys must be token ids (non-negative integers).", name),
            f.name("logit_bias"));
      }
      if (!value.is_number()) {
        throw_invalid(fmt::format("Invalid type for '{}': expected a number, but got {} instead.",
                                  name, json_type_name(value)),
                      f.name("logit_bias"));
      }
      double b = value.get<double>();
      if (!(b >= -100 && b <= 100)) {
        throw_invalid(
            fmt::format("Invalid '{}': bias must be between -100 and 100, got {}.", name, b),
            f.name("logit_bias"));
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
  }
  if (const json* stop = f.get("stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStops) {
        throw_invalid(fmt::format("Invalid 'stop': at most {} stop sequences, got {}.", kMaxStops,
                                  stop->size()),
                      "stop");
      }
      for (std::size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) {
          throw_invalid(fmt::format("Invalid type for 'stop[{}]': expected a string, but got {} "
                                    "instead.",
                                    i, json_type_name((*stop)[i])),
                        "stop");
        }
        r.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      f.type_error("stop", "a string or an array of strings");
    }
  }
  if (auto v = f.integer("n", 1, 128)) r.n = static_cast<int>(*v);
  if (auto v = f.boolean("stream")) r.stream = *v;
  if (const json* opts = f.object("stream_options")) {
    FieldReader so(*opts, "stream_options.");
    if (auto v = so.boolean("include_usage")) r.include_usage = *v;
  }
  if (const json* kwargs = f.object("chat_template_kwargs")) {
    r.template_kwargs = *kwargs;
    auto it = kwargs->find("enable_thinking");
    if (it != kwargs->end() && !it->is_null()) {
      if (!it->is_boolean()) {
        throw_invalid(
            "Invalid type for 'chat_template_kwargs.enable_thinking': expected a "
            "boolean, but got " +
                json_type_name(*it) + " instead.",
            "chat_template_kwargs.enable_thinking");
      }
      r.enable_thinking = it->get<bool>();
    }
  }
  if (const json* rf = f.object("response_format")) {
    FieldReader rr(*rf, "response_format.");
    std::string type = rr.string("type").value_or("text");
    if (type != "text") {
      throw ApiException{invalid_request(
          fmt::format("response_format type '{}' is not supported by this server yet (no "
                      "constrained decoding); use 'text'",
                      type),
          "response_format.type")};
    }
  }
}

void read_max_tokens(const FieldReader& f, GenerationRequest& r) {
  // max_completion_tokens supersedes the deprecated max_tokens when both are present.
  auto mt = f.integer("max_tokens", 1, kMaxTokensCap);
  auto mct = f.integer("max_completion_tokens", 1, kMaxTokensCap);
  if (mct) {
    r.max_tokens = static_cast<int>(*mct);
  } else if (mt) {
    r.max_tokens = static_cast<int>(*mt);
  }
}

std::string read_model(const FieldReader& f) { return f.string("model").value_or(""); }

// Text of a content value: a string, or an array of {"type":"text","text":..} parts.
json normalize_content(const json& content, const std::string& field, bool allow_null) {
  if (content.is_null()) {
    if (!allow_null) throw_invalid(fmt::format("Missing required parameter: '{}'.", field), field);
    return nullptr;
  }
  if (content.is_string()) return content;
  if (!content.is_array()) {
    throw_invalid(fmt::format("Invalid type for '{}': expected a string or an array of content "
                              "parts, but got {} instead.",
                              field, json_type_name(content)),
                  field);
  }
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string pf = fmt::format("{}[{}]", field, i);
    if (!part.is_object()) {
      throw_invalid(fmt::format("Invalid type for '{}': expected an object, but got {} instead.",
                                pf, json_type_name(part)),
                    pf);
    }
    FieldReader p(part, pf + ".");
    std::string type = p.string("type").value_or("");
    if (type == "text" || type == "input_text" || type == "output_text") {
      auto t = p.string("text");
      if (!t)
        throw_invalid(fmt::format("Missing required parameter: '{}.text'.", pf), pf + ".text");
      if (!text.empty()) text += "\n";
      text += *t;
    } else if (type == "image_url" || type == "input_image" || type == "input_audio" ||
               type == "image" || type == "audio_url") {
      throw ApiException{invalid_request(
          fmt::format("'{}': content type '{}' is not supported by the loaded model (text only)",
                      pf, type),
          pf + ".type")};
    } else {
      throw_invalid(
          fmt::format("Invalid value for '{}.type': unknown content part type '{}'.", pf, type),
          pf + ".type");
    }
  }
  return text;
}

json parse_messages_array(const FieldReader& f) {
  const json* messages = f.array("messages");
  if (!messages) throw_invalid("Missing required parameter: 'messages'.", "messages");
  if (messages->empty()) {
    throw_invalid(
        "Invalid 'messages': empty array. Expected an array with minimum length 1, but "
        "got an empty array instead.",
        "messages");
  }
  json out = json::array();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    std::string mf = fmt::format("messages[{}]", i);
    if (!m.is_object()) {
      throw_invalid(fmt::format("Invalid type for '{}': expected an object, but got {} instead.",
                                mf, json_type_name(m)),
                    mf);
    }
    FieldReader mr(m, mf + ".");
    auto role = mr.string("role");
    if (!role)
      throw_invalid(fmt::format("Missing required parameter: '{}.role'.", mf), mf + ".role");
    json msg = json::object();
    if (*role == "developer") role = "system";
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool" &&
        *role != "function") {
      throw_invalid(fmt::format("Invalid value: '{}'. Supported values are: 'system', "
                                "'developer', 'user', 'assistant', 'tool' and 'function'.",
                                *role),
                    mf + ".role");
    }
    msg["role"] = *role;
    bool has_calls = false;
    if (const json* calls = mr.array("tool_calls"); calls && *role == "assistant") {
      json out_calls = json::array();
      for (std::size_t k = 0; k < calls->size(); ++k) {
        std::string cf = fmt::format("{}.tool_calls[{}]", mf, k);
        const json& c = (*calls)[k];
        if (!c.is_object()) {
          throw_invalid(fmt::format("Invalid type for '{}': expected an object.", cf), cf);
        }
        FieldReader cr(c, cf + ".");
        const json* fn = cr.object("function");
        if (!fn)
          throw_invalid(fmt::format("Missing required parameter: '{}.function'.", cf),
                        cf + ".function");
        FieldReader fr(*fn, cf + ".function.");
        auto name = fr.string("name");
        if (!name)
          throw_invalid(fmt::format("Missing required parameter: '{}.function.name'.", cf),
                        cf + ".function.name");
        json args = json::object();
        if (const json* a = fr.get("arguments")) {
          if (a->is_string()) {
            // Templates index into arguments; give them the object when it parses.
            json parsed = json::parse(a->get<std::string>(), nullptr, false);
            args = parsed.is_discarded() ? *a : parsed;
          } else if (a->is_object()) {
            args = *a;
          } else {
            fr.type_error("arguments", "a string");
          }
        }
        out_calls.push_back({{"id", cr.string("id").value_or(fmt::format("call_{}", k))},
                             {"type", "function"},
                             {"function", {{"name", *name}, {"arguments", args}}}});
      }
      msg["tool_calls"] = out_calls;
      has_calls = !out_calls.empty();
    }
    const json* content = mr.get("content");
    msg["content"] = normalize_content(content ? *content : json(nullptr), mf + ".content",
                                       *role == "assistant");
    // Simple templates concatenate content; give them "" rather than null.
    if (msg["content"].is_null()) msg["content"] = "";
    (void)has_calls;
    if (auto rc = mr.string("reasoning_content")) msg["reasoning_content"] = *rc;
    if (auto id = mr.string("tool_call_id")) msg["tool_call_id"] = *id;
    if (auto name = mr.string("name")) msg["name"] = *name;
    out.push_back(std::move(msg));
  }
  return out;
}

void parse_tool_choice(const FieldReader& f, GenerationRequest& r) {
  const json* tc = f.get("tool_choice");
  if (!tc) return;
  if (tc->is_string()) {
    std::string v = tc->get<std::string>();
    if (v == "auto") {
      r.tool_choice = ToolChoice::kAuto;
    } else if (v == "none") {
      r.tool_choice = ToolChoice::kNone;
    } else if (v == "required") {
      r.tool_choice = ToolChoice::kRequired;
    } else {
      throw_invalid(fmt::format("Invalid value for 'tool_choice': '{}'. Supported values are: "
                                "'none', 'auto' and 'required'.",
                                v),
                    "tool_choice");
    }
    return;
  }
  if (!tc->is_object()) f.type_error("tool_choice", "a string or an object");
  FieldReader tr(*tc, "tool_choice.");
  std::optional<std::string> name;
  if (const json* fn = tr.object("function"))
    name = FieldReader(*fn, "tool_choice.function.").string("name");
  if (!name) name = tr.string("name");
  if (!name)
    throw_invalid("Missing required parameter: 'tool_choice.function.name'.",
                  "tool_choice.function.name");
  r.tool_choice = ToolChoice::kNamed;
  r.tool_choice_name = *name;
}

}  // namespace

json parse_openai_tools(const json& tools, const std::string& field) {
  if (!tools.is_array()) {
    throw_invalid(fmt::format("Invalid type for '{}': expected an array, but got {} instead.",
                              field, json_type_name(tools)),
                  field);
  }
  json out = json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    std::string tf = fmt::format("{}[{}]", field, i);
    const json& t = tools[i];
    if (!t.is_object()) {
      throw_invalid(fmt::format("Invalid type for '{}': expected an object.", tf), tf);
    }
    FieldReader tr(t, tf + ".");
    std::string type = tr.string("type").value_or("function");
    if (type != "function") {
      throw_invalid(fmt::format("Invalid value for '{}.type': '{}'. Supported values are: "
                                "'function'.",
                                tf, type),
                    tf + ".type");
    }
    // Chat's nested {"function": {...}} or the Responses API's flat form.
    const json* fn = tr.object("function");
    const json& def = fn ? *fn : t;
    std::string prefix = fn ? tf + ".function." : tf + ".";
    FieldReader fr(def, prefix);
    auto name = fr.string("name");
    if (!name || name->empty()) {
      throw_invalid(fmt::format("Missing required parameter: '{}name'.", prefix), prefix + "name");
    }
    json function = {{"name", *name}};
    if (auto d = fr.string("description")) function["description"] = *d;
    if (const json* p = fr.object("parameters")) {
      function["parameters"] = *p;
    } else {
      function["parameters"] = {{"type", "object"}, {"properties", json::object()}};
    }
    out.push_back({{"type", "function"}, {"function", function}});
  }
  return out;
}

GenerationRequest parse_chat_completions(const json& body) {
  FieldReader f(body);
  GenerationRequest r;
  r.api = ApiKind::kChatCompletions;
  r.model = read_model(f);
  r.messages = parse_messages_array(f);
  parse_sampling(f, r);
  read_max_tokens(f, r);
  if (auto v = f.boolean("logprobs")) r.logprobs = *v;
  if (auto v = f.integer("top_logprobs", 0, 20)) {
    r.top_logprobs = static_cast<int>(*v);
    if (!r.logprobs && *v > 0) {
      throw_invalid(
          "Invalid value for 'top_logprobs': 'logprobs' must be true when "
          "'top_logprobs' is set.",
          "top_logprobs");
    }
  }
  if (const json* tools = f.get("tools")) {
    r.tools = parse_openai_tools(*tools, "tools");
    if (r.tools.empty()) r.tools = nullptr;
  }
  parse_tool_choice(f, r);
  return r;
}

GenerationRequest parse_completions(const json& body) {
  FieldReader f(body);
  GenerationRequest r;
  r.api = ApiKind::kCompletions;
  r.model = read_model(f);
  const json* prompt = f.get("prompt");
  if (!prompt) throw_invalid("Missing required parameter: 'prompt'.", "prompt");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    r.prompt = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
    for (std::size_t i = 0; i < prompt->size(); ++i) {
      const json& t = (*prompt)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        throw_invalid(fmt::format("Invalid 'prompt[{}]': expected a token id.", i), "prompt");
      }
      r.prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  } else if (prompt->is_array()) {
    throw_invalid(
        "Invalid 'prompt': batched prompts (several strings) are not supported; send "
        "one prompt per request.",
        "prompt");
  } else {
    f.type_error("prompt", "a string or an array of token ids");
  }
  parse_sampling(f, r);
  read_max_tokens(f, r);
  if (auto v = f.integer("logprobs", 0, 5)) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(*v);
  }
  if (auto v = f.boolean("echo")) r.echo = *v;
  if (f.has("suffix")) {
    throw_invalid("'suffix' (fill-in-the-middle) is not supported by this server.", "suffix");
  }
  if (auto v = f.integer("best_of", 1, 128); v && *v != r.n) {
    throw_invalid("'best_of' other than n is not supported by this server.", "best_of");
  }
  return r;
}

}  // namespace hearth::server
