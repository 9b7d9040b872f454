// Builds a Tokenizer from tokenizer.json (and the BOS/EOS settings beside it): every
// component through its factory, so an unsupported one fails the load by name.
#include <nlohmann/json.hpp>

#include <filesystem>

#include "base/mapped_file.h"
#include "text/bpe.h"
#include "text/tokenizer_impl.h"
#include "text/tokenizer_json.h"
#include "text/unigram.h"

namespace hearth::text {
namespace {

Result<std::unique_ptr<Model>> make_model(const nlohmann::json& config,
                                          std::optional<BpeTables> tables, bool& byte_mode) {
  if (!config.is_object()) return parse_error("tokenizer.json has no \"model\" object");
  std::string type = config.value("type", std::string());
  if (type.empty()) {  // older files omit the type; the fields tell
    if (config.contains("merges")) {
      type = "BPE";
    } else if (config.contains("vocab") && config["vocab"].is_array()) {
      type = "Unigram";
    }
  }
  if (type == "BPE") {
    auto non_empty = [&](const char* field) {
      auto it = config.find(field);
      return it != config.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
    };
    if (non_empty("continuing_subword_prefix") || non_empty("end_of_word_suffix"))
      byte_mode = false;
    if (!tables) {
      HEARTH_ASSIGN_OR_RETURN(tables, bpe_tables_from_json(config));
    }
    HEARTH_ASSIGN_OR_RETURN(auto bpe, BpeModel::build(config, std::move(*tables), byte_mode));
    return std::unique_ptr<Model>(std::move(bpe));
  }
  byte_mode = false;
  if (type == "Unigram") {
    HEARTH_ASSIGN_OR_RETURN(auto unigram, UnigramModel::from_json(config));
    return std::unique_ptr<Model>(std::move(unigram));
  }
  return unsupported_error("unsupported model type '{}'", type.empty() ? "(none)" : type);
}

// "bos_token": "<s>" or {"content": "<s>", ...}.
std::optional<std::string> token_field(const nlohmann::json& config, const char* name) {
  auto it = config.find(name);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

Status read_special_config(const std::filesystem::path& dir, const Tokenizer& tokenizer,
                           Tokenizer::Impl& impl) {
  auto config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_file(config_path.string()));
    auto config = nlohmann::json::parse(text, nullptr, false);
    if (config.is_discarded()) return parse_error("{} is not valid JSON", config_path.string());
    if (auto bos = token_field(config, "bos_token")) impl.bos_id = tokenizer.token_to_id(*bos);
    if (auto eos = token_field(config, "eos_token")) {
      if (auto id = tokenizer.token_to_id(*eos)) impl.eos_ids.push_back(*id);
    }
  }
  auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_file(gen_path.string()));
    auto config = nlohmann::json::parse(text, nullptr, false);
    if (config.is_discarded()) return parse_error("{} is not valid JSON", gen_path.string());
    auto add_eos = [&](const nlohmann::json& v) {
      if (!v.is_number_integer()) return;
      auto id = v.get<int32_t>();
      for (int32_t e : impl.eos_ids) {
        if (e == id) return;
      }
      impl.eos_ids.push_back(id);
    };
    if (auto it = config.find("eos_token_id"); it != config.end()) {
      if (it->is_array()) {
        for (const auto& v : *it) add_eos(v);
      } else {
        add_eos(*it);
      }
    }
    if (!impl.bos_id) {
      if (auto it = config.find("bos_token_id"); it != config.end() && it->is_number_integer()) {
        impl.bos_id = it->get<int32_t>();
      }
    }
  }
  return ok_status();
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json_text(std::string_view tokenizer_json) {
  HEARTH_ASSIGN_OR_RETURN(TokenizerJson parsed, parse_tokenizer_json(tokenizer_json));
  const nlohmann::json& root = parsed.root;
  auto impl = std::make_unique<Impl>();
  auto present = [&](const char* field) {
    auto it = root.find(field);
    return it != root.end() && !it->is_null();
  };
  if (present("normalizer")) {
    HEARTH_ASSIGN_OR_RETURN(impl->normalizer, make_normalizer(root["normalizer"]));
  }
  bool byte_mode = false;
  if (present("pre_tokenizer")) {
    HEARTH_ASSIGN_OR_RETURN(impl->pre_tokenizer, make_pre_tokenizer(root["pre_tokenizer"]));
    // Probe whether the last step is ByteLevel; make_model may still refuse byte mode, in
    // which case the pre-tokenizer is rebuilt with its mapping on.
    byte_mode = impl->pre_tokenizer->defer_byte_mapping();
  }
  const bool wanted_byte_mode = byte_mode;
  HEARTH_ASSIGN_OR_RETURN(impl->model,
                          make_model(root.contains("model") ? root["model"] : nlohmann::json(),
                                     std::move(parsed.bpe), byte_mode));
  if (wanted_byte_mode && !byte_mode) {
    HEARTH_ASSIGN_OR_RETURN(impl->pre_tokenizer, make_pre_tokenizer(root["pre_tokenizer"]));
  }
  if (present("post_processor")) {
    HEARTH_ASSIGN_OR_RETURN(impl->post_processor, make_post_processor(root["post_processor"]));
  }
  if (present("decoder")) {
    HEARTH_ASSIGN_OR_RETURN(impl->decoder, make_decoder(root["decoder"]));
  }

  // Added tokens are numbered as the reference numbers them on load: a token the model has
  // keeps the model's id, a repeated content keeps its first id, and any other takes the
  // next id after the model's token count (the file's "id" is only a hint; in well-formed
  // files the two agree).
  std::vector<AddedToken> added;
  StringIdMap added_ids;
  const int32_t model_count = impl->model->token_count();
  int32_t max_added = -1;
  if (present("added_tokens")) {
    if (!root["added_tokens"].is_array()) return parse_error("added_tokens must be an array");
    for (const auto& t : root["added_tokens"]) {
      AddedToken token;
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string()) {
        return parse_error("added token without content: {}", t.dump());
      }
      token.content = t["content"].get<std::string>();
      token.special = t.value("special", false);
      token.lstrip = t.value("lstrip", false);
      token.rstrip = t.value("rstrip", false);
      token.normalized = t.value("normalized", !token.special);
      token.single_word = t.value("single_word", false);
      if (auto it = added_ids.find(token.content); it != added_ids.end()) {
        token.id = it->second;
      } else if (auto model_id = impl->model->token_to_id(token.content)) {
        token.id = *model_id;
      } else if (max_added < 0) {
        token.id = model_count;
      } else {
        token.id = max_added >= model_count || model_count == 0 ? max_added + 1 : model_count;
      }
      max_added = std::max(max_added, token.id);
      added_ids.emplace(token.content, token.id);
      added.push_back(std::move(token));
    }
  }
  HEARTH_ASSIGN_OR_RETURN(impl->added, AddedVocab::build(std::move(added), impl->normalizer.get()));

  impl->vocab_size = impl->model->vocab_size();
  for (const AddedToken& t : impl->added.tokens()) {
    impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
  }
  impl->special.assign(static_cast<size_t>(impl->vocab_size), false);
  for (const AddedToken& t : impl->added.tokens()) {
    if (!t.special) continue;
    // The reference tests the decoded token string, so any id spelling it is special.
    impl->special[t.id] = true;
    if (auto model_id = impl->model->token_to_id(t.content)) impl->special[*model_id] = true;
  }
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::load(const std::string& dir_or_tokenizer_json) {
  namespace fs = std::filesystem;
  fs::path path(dir_or_tokenizer_json);
  std::error_code ec;
  if (fs::is_directory(path, ec)) path /= "tokenizer.json";
  if (!fs::exists(path, ec)) return not_found_error("no tokenizer file at {}", path.string());
  HEARTH_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path.string()));
  std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  Result<Tokenizer> tokenizer = from_json_text(text);
  if (!tokenizer.ok()) return tokenizer.status().with_context("loading " + path.string());
  HEARTH_RETURN_IF_ERROR(read_special_config(path.parent_path(), *tokenizer, *tokenizer->impl_)
                             .with_context("loading " + path.parent_path().string()));
  return tokenizer;
}

}  // namespace hearth::text
