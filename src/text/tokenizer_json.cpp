// SAX handler: DOM building with two intercepted paths, model.vocab (object of ids) and
// model.merges (array of "a b" strings or [a, b] pairs).
#include "text/tokenizer_json.h"

namespace hearth::text {
namespace {

using json = nlohmann::json;

Result<std::pair<std::string, std::string>> split_merge(const std::string& s) {
  size_t space = s.find(' ');
  if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
    return parse_error("merge '{}' is not two tokens separated by one space", s);
  }
  return std::make_pair(s.substr(0, space), s.substr(space + 1));
}

class Handler final : public nlohmann::json_sax<json> {
 public:
  TokenizerJson result;
  Status error;

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) {
      vocab().emplace_back(std::move(key_), v);
      return true;
    }
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      vocab().emplace_back(std::move(key_), static_cast<int64_t>(v));
      return true;
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ != Mode::kDom) return fail("model.vocab / model.merges hold a number out of place");
    return value(json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {
      auto pair = split_merge(v);
      if (!pair.ok()) {
        error = pair.status();
        return false;
      }
      merges().push_back(std::move(*pair));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      pair_.push_back(std::move(v));
      return true;
    }
    if (mode_ == Mode::kVocab) return fail("model.vocab holds a string id");
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail("binary JSON value"); }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return fail("model.vocab / model.merges hold an object");
    if (at_model_field("vocab")) {
      mode_ = Mode::kVocab;
      if (!result.bpe) result.bpe.emplace();  // "merges" may come first
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::kDom) return fail("model.vocab / model.merges nest too deep");
    if (at_model_field("merges")) {
      mode_ = Mode::kMerges;
      if (!result.bpe) result.bpe.emplace();
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_.size() != 2) return fail("a merge pair does not hold two strings");
      merges().emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error =
        hearth::parse_error("tokenizer.json is not valid JSON at byte {}: {}", position, ex.what());
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  std::vector<std::pair<std::string, int64_t>>& vocab() { return result.bpe->vocab; }
  std::vector<std::pair<std::string, std::string>>& merges() { return result.bpe->merges; }

  bool fail(const char* message) {
    error = hearth::parse_error("tokenizer.json: {}", message);
    return false;
  }

  // Opening a container under key_ of model (the object keyed "model" under the root).
  bool at_model_field(const char* field) const {
    return stack_.size() == 2 && keys_.size() == 2 && keys_[1] == "model" && key_ == field &&
           stack_.back()->is_object();
  }

  json* insert(json v) {
    if (stack_.empty()) {
      result.root = std::move(v);
      return &result.root;
    }
    json* top = stack_.back();
    if (top->is_object()) {
      json& slot = (*top)[key_];
      slot = std::move(v);
      return &slot;
    }
    top->push_back(std::move(v));
    return &top->back();
  }
  bool value(json v) {
    insert(std::move(v));
    return true;
  }
  bool open(json container) {
    std::string under = stack_.empty() || !stack_.back()->is_object() ? std::string() : key_;
    stack_.push_back(insert(std::move(container)));
    keys_.push_back(std::move(under));
    return true;
  }

  Mode mode_ = Mode::kDom;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // the key each open container sits under ("" in arrays)
  std::string key_;
  std::vector<std::string> pair_;
};

}  // namespace

Result<TokenizerJson> parse_tokenizer_json(std::string_view text) {
  Handler handler;
  bool ok = json::sax_parse(text.begin(), text.end(), &handler);
  if (!ok) {
    if (!handler.error.ok()) return handler.error;
    return parse_error("tokenizer.json is not valid JSON");
  }
  if (!handler.result.root.is_object()) return parse_error("tokenizer.json is not a JSON object");
  return std::move(handler.result);
}

Result<BpeTables> bpe_tables_from_json(const nlohmann::json& model) {
  BpeTables tables;
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return parse_error("BPE model without vocab");
  tables.vocab.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return parse_error("vocab id of '{}' is not an integer", it.key());
    }
    tables.vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
  auto merges = model.find("merges");
  if (merges != model.end() && merges->is_array()) {
    tables.merges.reserve(merges->size());
    for (const auto& m : *merges) {
      if (m.is_string()) {
        HEARTH_ASSIGN_OR_RETURN(auto pair, split_merge(m.get<std::string>()));
        tables.merges.push_back(std::move(pair));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        tables.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return parse_error("merge must be \"a b\" or [a, b]: {}", m.dump());
      }
    }
  }
  return tables;
}

}  // namespace hearth::text
