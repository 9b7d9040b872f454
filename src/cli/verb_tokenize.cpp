// `hearth tokenize`: encode text to token ids (one JSON array) or decode ids back to text
// with a model's tokenizer.json, exactly as HF tokenizers does; `--bench` times encoding.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/mapped_file.h"
#include "cli/verb.h"
#include "text/tokenizer.h"

namespace hearth::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::optional<std::string> text;
  std::optional<std::string> file;
  bool special = false;
  bool decode = false;
  bool skip_special = false;
  int bench = 0;
};

void fail(const std::string& message) {
  std::fprintf(stderr, "hearth tokenize: %s\n", message.c_str());
}

Result<std::string> read_input(const TokenizeArgs& args) {
  if (args.text) return *args.text;
  if (args.file) return read_file(*args.file);
  std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return all;
}

int run_decode(const text::Tokenizer& tok, const std::string& input, bool skip_special) {
  auto ids_json = nlohmann::json::parse(input, nullptr, false);
  if (ids_json.is_discarded() || !ids_json.is_array()) {
    fail("--decode expects a JSON array of token ids");
    return kExitFailure;
  }
  std::vector<int32_t> ids;
  for (const auto& v : ids_json) {
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
      fail("--decode: not a token id: " + v.dump());
      return kExitFailure;
    }
    auto id = v.get<int32_t>();
    if (id < 0 || id >= tok.vocab_size()) {  // the library skips these; a user wants to know
      fail(fmt::format("token id {} is outside the vocabulary [0, {})", id, tok.vocab_size()));
      return kExitFailure;
    }
    ids.push_back(id);
  }
  auto text = tok.decode(ids, skip_special);
  if (!text.ok()) {
    fail(text.status().message());
    return kExitFailure;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  return kExitOk;
}

int run_bench(const text::Tokenizer& tok, const std::string& input, bool special, int rounds) {
  size_t tokens = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    auto ids = tok.encode(input, special);
    if (!ids.ok()) {
      fail(ids.status().message());
      return kExitFailure;
    }
    tokens += ids->size();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double bytes = static_cast<double>(input.size()) * rounds;
  std::printf(
      "{\"rounds\": %d, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.3f, "
      "\"tokens_per_s\": %.0f}\n",
      rounds, input.size(), tokens / static_cast<size_t>(rounds), seconds, bytes / seconds / 1e6,
      static_cast<double>(tokens) / seconds);
  return kExitOk;
}

int run_tokenize(const TokenizeArgs& args) {
  auto tok = text::Tokenizer::load(args.tokenizer);
  if (!tok.ok()) {
    fail(tok.status().message());
    return kExitFailure;
  }
  auto input = read_input(args);
  if (!input.ok()) {
    fail(input.status().message());
    return kExitFailure;
  }
  if (args.decode) return run_decode(*tok, *input, args.skip_special);
  if (args.bench > 0) return run_bench(*tok, *input, args.special, args.bench);
  auto ids = tok->encode(*input, args.special);
  if (!ids.ok()) {
    fail(ids.status().message());
    return kExitFailure;
  }
  std::string out = nlohmann::json(*ids).dump();
  std::printf("%s\n", out.c_str());
  return kExitOk;
}

}  // namespace

Verb add_tokenize_verb(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Encode text to token ids, or decode ids to text, with a model's tokenizer");
  cmd->add_option("--tokenizer", args->tokenizer, "Model directory or tokenizer.json")->required();
  auto* text = cmd->add_option("--text", args->text, "Input text (ids with --decode)");
  cmd->add_option("--file", args->file, "Read the input from this file")->excludes(text);
  cmd->add_flag("--special", args->special,
                "Add the model's special tokens (BOS etc.) when encoding");
  auto* decode = cmd->add_flag("--decode", args->decode,
                               "Decode a JSON array of ids; prints the text exactly");
  cmd->add_flag("--skip-special", args->skip_special, "With --decode: drop special tokens")
      ->needs(decode);
  cmd->add_option("--bench", args->bench,
                  "Encode the input N times and print throughput as JSON (single thread)")
      ->check(CLI::Range(1, 1000000))
      ->excludes(decode);
  return {cmd, [args] { return run_tokenize(*args); }};
}

}  // namespace hearth::cli
