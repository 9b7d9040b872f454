// TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (ids unchanged) and
// Sequence, for single sequences.
#include "text/post_processor.h"

#include <nlohmann/json.hpp>

#include <string>

namespace hearth::text {
namespace {

// Result<unique_ptr<Base>> from a derived component (two conversions in one step).
template <typename T, typename... Args>
Result<std::unique_ptr<PostProcessor>> make(Args&&... args) {
  return std::unique_ptr<PostProcessor>(std::make_unique<T>(std::forward<Args>(args)...));
}

class TemplateProcessor final : public PostProcessor {
 public:
  // Each piece: the sequence itself (empty vector flagged by is_sequence) or special ids.
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  explicit TemplateProcessor(std::vector<Item> items) : items_(std::move(items)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<int32_t> out;
    out.reserve(ids.size() + 8);
    for (const Item& item : items_) {
      if (item.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), item.ids.begin(), item.ids.end());
      }
    }
    ids = std::move(out);
  }

 private:
  std::vector<Item> items_;
};

class IdentityProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&, bool) const override {}
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

Result<int32_t> pair_id(const nlohmann::json& config, const char* field) {
  auto it = config.find(field);
  if (it == config.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
    return parse_error("post_processor field '{}' must be [token, id]", field);
  }
  return (*it)[1].get<int32_t>();
}

Result<std::unique_ptr<PostProcessor>> make_template(const nlohmann::json& config) {
  auto single = config.find("single");
  if (single == config.end() || !single->is_array()) {
    return parse_error("TemplateProcessing without a \"single\" template");
  }
  auto specials = config.find("special_tokens");
  std::vector<TemplateProcessor::Item> items;
  for (const auto& piece : *single) {
    if (piece.contains("Sequence")) {
      items.push_back({true, {}});
    } else if (piece.contains("SpecialToken")) {
      std::string name = piece["SpecialToken"].value("id", std::string());
      if (specials == config.end() || !specials->contains(name)) {
        return parse_error("TemplateProcessing uses special token '{}' it does not define", name);
      }
      const auto& ids = (*specials)[name]["ids"];
      if (!ids.is_array()) return parse_error("special token '{}' without ids", name);
      items.push_back({false, ids.get<std::vector<int32_t>>()});
    } else {
      return parse_error("TemplateProcessing piece not understood: {}", piece.dump());
    }
  }
  return make<TemplateProcessor>(std::move(items));
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return parse_error("post_processor without a \"type\": {}", config.dump());
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "TemplateProcessing") return make_template(config);
  if (type == "ByteLevel") return make<IdentityProcessor>();  // offsets only
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    HEARTH_ASSIGN_OR_RETURN(int32_t cls, pair_id(config, "cls"));
    HEARTH_ASSIGN_OR_RETURN(int32_t sep, pair_id(config, "sep"));
    std::vector<TemplateProcessor::Item> items{{false, {cls}}, {true, {}}, {false, {sep}}};
    return make<TemplateProcessor>(std::move(items));
  }
  if (type == "Sequence") {
    auto it = config.find("processors");
    if (it == config.end() || !it->is_array()) return parse_error("Sequence without processors");
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const auto& child : *it) {
      HEARTH_ASSIGN_OR_RETURN(auto step, make_post_processor(child));
      steps.push_back(std::move(step));
    }
    return make<SequenceProcessor>(std::move(steps));
  }
  return unsupported_error("unsupported post_processor type '{}'", type);
}

}  // namespace hearth::text
