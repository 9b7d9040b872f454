// Literal and regex patterns behind one find/replace interface.
#include "text/pattern.h"

#include <nlohmann/json.hpp>

namespace hearth::text {

Result<Pattern> Pattern::from_json(const nlohmann::json& config) {
  if (!config.is_object()) return parse_error("pattern must be an object");
  if (auto it = config.find("String"); it != config.end() && it->is_string()) {
    return literal(it->get<std::string>());
  }
  if (auto it = config.find("Regex"); it != config.end() && it->is_string()) {
    return regex(it->get<std::string>());
  }
  return parse_error("pattern must hold \"String\" or \"Regex\": {}", config.dump());
}

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Result<Pattern> Pattern::regex(std::string_view pattern) {
  Pattern p;
  HEARTH_ASSIGN_OR_RETURN(Regex re, Regex::compile(pattern));
  p.regex_ = std::move(re);
  return p;
}

Status Pattern::find_all(std::string_view text, std::vector<RegexMatch>& out) const {
  if (regex_) return regex_->find_all(text, out);
  if (literal_.empty()) return ok_status();
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    out.push_back({pos, pos + literal_.size()});
    pos += literal_.size();
  }
  return ok_status();
}

Result<std::string> Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<RegexMatch> matches;
  HEARTH_RETURN_IF_ERROR(find_all(text, matches));
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const RegexMatch& m : matches) {
    out.append(text.substr(prev, m.start - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace hearth::text
