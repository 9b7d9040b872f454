// Tool-call parsers per family. Every parse is all-or-nothing per block: either every call
// in it yields a name and object arguments, or the block is returned as text.
#include "text/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace hearth::text {
namespace {

using nlohmann::json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::size_t partial_suffix(std::string_view s, std::string_view tag) {
  std::size_t max_k = std::min(tag.size() - 1, s.size());
  for (std::size_t k = max_k; k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

std::optional<json> parse_json(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Arguments must end up as a JSON object; a string holding one is accepted too.
std::optional<std::string> normalize_arguments(const json& args) {
  if (args.is_object()) return args.dump();
  if (args.is_string()) {
    auto inner = parse_json(args.get<std::string>());
    if (inner && inner->is_object()) return inner->dump();
  }
  return std::nullopt;
}

// {"name": .., "arguments"|"parameters": {..}}
std::optional<ParsedToolCall> call_from_object(const json& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  std::optional<std::string> normalized = std::string("{}");
  if (args != j.end()) normalized = normalize_arguments(*args);
  if (!normalized) return std::nullopt;
  return ParsedToolCall{name->get<std::string>(), *normalized};
}

// Splits concatenated JSON values ("{..}; {..}" or "{..}\n{..}"), tolerating ';' and
// whitespace between them. Empty on any stray byte.
std::vector<std::string_view> split_json_values(std::string_view s) {
  std::vector<std::string_view> values;
  std::size_t i = 0;
  while (true) {
    while (i < s.size() && (is_space(s[i]) || s[i] == ';')) ++i;
    if (i >= s.size()) break;
    if (s[i] != '{' && s[i] != '[') return {};
    int depth = 0;
    bool in_string = false;
    std::size_t start = i;
    for (; i < s.size(); ++i) {
      char c = s[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') in_string = true;
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) {
          ++i;
          break;
        }
      }
    }
    if (depth != 0) return {};
    values.push_back(s.substr(start, i - start));
  }
  return values;
}

std::vector<ParsedToolCall> calls_from_json_text(std::string_view text) {
  std::vector<ParsedToolCall> calls;
  auto values = split_json_values(text);
  if (values.empty()) return {};
  for (auto v : values) {
    auto j = parse_json(v);
    if (!j) return {};
    if (j->is_array()) {
      if (j->empty()) return {};
      for (const auto& item : *j) {
        auto call = call_from_object(item);
        if (!call) return {};
        calls.push_back(std::move(*call));
      }
    } else {
      auto call = call_from_object(*j);
      if (!call) return {};
      calls.push_back(std::move(*call));
    }
  }
  return calls;
}

std::vector<ParsedToolCall> parse_hermes(std::string_view block) {
  if (block.substr(0, kHermesOpen.size()) != kHermesOpen) return {};
  block.remove_prefix(kHermesOpen.size());
  if (block.size() >= kHermesClose.size() &&
      block.substr(block.size() - kHermesClose.size()) == kHermesClose) {
    block.remove_suffix(kHermesClose.size());
  }
  return calls_from_json_text(trim(block));
}

std::vector<ParsedToolCall> parse_llama3(std::string_view block) {
  block = trim(block);
  if (block.substr(0, kPythonTag.size()) == kPythonTag) block.remove_prefix(kPythonTag.size());
  return calls_from_json_text(trim(block));
}

// "[TOOL_CALLS][{..}]", or one or more "[TOOL_CALLS]name[CALL_ID]id[ARGS]{..}".
std::vector<ParsedToolCall> parse_mistral(std::string_view block) {
  std::vector<ParsedToolCall> calls;
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while ((pos = block.find(kMistralCalls, pos)) != std::string_view::npos) {
    std::size_t start = pos + kMistralCalls.size();
    std::size_t next = block.find(kMistralCalls, start);
    parts.push_back(block.substr(start, next == std::string_view::npos ? next : next - start));
    pos = start;
  }
  if (parts.empty()) return {};
  for (auto part : parts) {
    part = trim(part);
    std::size_t args_at = part.find(kMistralArgs);
    if (args_at == std::string_view::npos) {
      auto more = calls_from_json_text(part);
      if (more.empty()) return {};
      calls.insert(calls.end(), more.begin(), more.end());
      continue;
    }
    std::string_view name = part.substr(0, args_at);
    std::size_t id_at = name.find(kMistralCallId);
    if (id_at != std::string_view::npos) name = name.substr(0, id_at);
    name = trim(name);
    auto args = parse_json(trim(part.substr(args_at + kMistralArgs.size())));
    if (name.empty() || !args) return {};
    auto normalized = normalize_arguments(*args);
    if (!normalized) return {};
    calls.push_back({std::string(name), *normalized});
  }
  return calls;
}

// Each call:
// "<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜>" (V3, R1)
// or "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}<｜tool▁call▁end｜>" (V3.1).
std::vector<ParsedToolCall> parse_deepseek(std::string_view block) {
  std::vector<ParsedToolCall> calls;
  std::size_t pos = 0;
  while ((pos = block.find(kDsCallBegin, pos)) != std::string_view::npos) {
    std::size_t start = pos + kDsCallBegin.size();
    std::size_t end = block.find(kDsCallEnd, start);
    if (end == std::string_view::npos) return {};
    std::string_view call = block.substr(start, end - start);
    pos = end + kDsCallEnd.size();
    std::size_t sep = call.find(kDsSep);
    if (sep == std::string_view::npos) return {};
    std::string_view head = trim(call.substr(0, sep));
    std::string_view rest = call.substr(sep + kDsSep.size());
    std::string_view name;
    std::string_view args_text;
    if (head == "function") {
      std::size_t nl = rest.find('\n');
      if (nl == std::string_view::npos) return {};
      name = trim(rest.substr(0, nl));
      args_text = trim(rest.substr(nl + 1));
      if (args_text.substr(0, 3) == "```") {
        std::size_t body = args_text.find('\n');
        if (body == std::string_view::npos) return {};
        args_text = args_text.substr(body + 1);
        std::size_t fence = args_text.rfind("```");
        if (fence == std::string_view::npos) return {};
        args_text = trim(args_text.substr(0, fence));
      }
    } else {
      name = head;
      args_text = trim(rest);
    }
    auto args = parse_json(args_text);
    if (name.empty() || !args) return {};
    auto normalized = normalize_arguments(*args);
    if (!normalized) return {};
    calls.push_back({std::string(name), *normalized});
  }
  return calls;
}

}  // namespace

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kDeepSeekV3:
      return "deepseek_v3";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view chat_template) {
  if (chat_template.find("tool▁calls▁begin") != std::string_view::npos) {
    return ToolCallFormat::kDeepSeekV3;
  }
  if (chat_template.find(kMistralCalls) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (chat_template.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (chat_template.find("<|python_tag|>") != std::string_view::npos ||
      (chat_template.find("<|eot_id|>") != std::string_view::npos &&
       chat_template.find("\"parameters\"") != std::string_view::npos)) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

std::vector<std::string> tool_call_markers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return {};
    case ToolCallFormat::kHermes:
      return {std::string(kHermesOpen), std::string(kHermesClose)};
    case ToolCallFormat::kLlama3Json:
      return {std::string(kPythonTag)};
    case ToolCallFormat::kMistral:
      return {std::string(kMistralCalls), std::string(kMistralArgs), std::string(kMistralCallId)};
    case ToolCallFormat::kDeepSeekV3:
      return {std::string(kDsCallsBegin), std::string(kDsCallsEnd), std::string(kDsCallBegin),
              std::string(kDsCallEnd), std::string(kDsSep)};
  }
  return {};
}

std::vector<ParsedToolCall> parse_tool_call_block(ToolCallFormat format, std::string_view block) {
  switch (format) {
    case ToolCallFormat::kNone:
      return {};
    case ToolCallFormat::kHermes:
      return parse_hermes(block);
    case ToolCallFormat::kLlama3Json:
      return parse_llama3(block);
    case ToolCallFormat::kMistral:
      return parse_mistral(block);
    case ToolCallFormat::kDeepSeekV3:
      return parse_deepseek(block);
  }
  return {};
}

ToolCallParser::ToolCallParser(ToolCallFormat format) : format_(format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      start_ = kHermesOpen;
      end_ = kHermesClose;
      break;
    case ToolCallFormat::kMistral:
      start_ = kMistralCalls;
      break;
    case ToolCallFormat::kDeepSeekV3:
      start_ = kDsCallsBegin;
      end_ = kDsCallsEnd;
      break;
    case ToolCallFormat::kLlama3Json:
    case ToolCallFormat::kNone:
      break;
  }
}

void ToolCallParser::emit_text(std::vector<ToolCallEvent>& out, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && !out.back().is_call) {
    out.back().text.append(text);
  } else {
    out.push_back({false, std::string(text), {}});
  }
}

void ToolCallParser::close_block(std::vector<ToolCallEvent>& out, bool at_end) {
  auto calls = parse_tool_call_block(format_, block_);
  if (calls.empty()) {
    emit_text(out, block_);
  } else {
    for (auto& c : calls) out.push_back({true, {}, std::move(c)});
  }
  block_.clear();
  in_block_ = false;
  (void)at_end;
}

std::vector<ToolCallEvent> ToolCallParser::push(std::string_view text) {
  std::vector<ToolCallEvent> out;
  if (format_ == ToolCallFormat::kNone) {
    emit_text(out, text);
    return out;
  }
  if (in_block_) {
    block_.append(text);
  } else {
    pending_.append(text);
  }
  if (format_ == ToolCallFormat::kLlama3Json) {
    // A Llama call is the whole output: decide on the first non-space bytes.
    if (at_start_) {
      std::string_view rest = trim(pending_);
      if (rest.empty()) return out;
      bool maybe_tag = rest.size() < kPythonTag.size()
                           ? kPythonTag.substr(0, rest.size()) == rest
                           : rest.substr(0, kPythonTag.size()) == kPythonTag;
      if (rest.size() < kPythonTag.size() && maybe_tag) return out;  // wait
      at_start_ = false;
      if (rest.front() == '{' || rest.front() == '[' || maybe_tag) {
        in_block_ = true;
        block_ = std::move(pending_);
        pending_.clear();
        return out;
      }
    }
    if (!in_block_) {
      emit_text(out, pending_);
      pending_.clear();
    }
    return out;
  }
  while (true) {
    if (!in_block_) {
      std::size_t pos = pending_.find(start_);
      if (pos == std::string::npos) {
        std::size_t hold = partial_suffix(pending_, start_);
        emit_text(out, std::string_view(pending_).substr(0, pending_.size() - hold));
        pending_.erase(0, pending_.size() - hold);
        return out;
      }
      emit_text(out, std::string_view(pending_).substr(0, pos));
      block_ = pending_.substr(pos);
      pending_.clear();
      in_block_ = true;
    }
    if (end_.empty()) return out;  // runs to the end of the output
    std::size_t close = block_.find(end_, start_.size());
    if (close == std::string::npos) return out;
    pending_ = block_.substr(close + end_.size());
    block_.resize(close + end_.size());
    close_block(out, false);
  }
}

std::vector<ToolCallEvent> ToolCallParser::finish() {
  std::vector<ToolCallEvent> out;
  if (in_block_) close_block(out, true);
  emit_text(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace hearth::text
