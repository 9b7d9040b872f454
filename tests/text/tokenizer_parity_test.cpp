// Token ids and decodes of six real tokenizers against goldens from HF tokenizers (Rust),
// made by tools/gen_tokenizer_goldens.mjs over tests/fixtures/tokenizers/corpus.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "base/mapped_file.h"
#include "text/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hearth::text {
namespace {

class TokenizerParity : public ::testing::TestWithParam<std::string> {};

std::string show(const std::string& s) { return nlohmann::json(s).dump(); }

TEST_P(TokenizerParity, IdsAndDecodesMatchReference) {
  const std::string name = GetParam();
  Result<Tokenizer> tok = load_test_tokenizer(name);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto corpus = read_fixture("corpus.json");
  auto golden = read_fixture(name + ".json");
  ASSERT_FALSE(corpus.is_discarded());
  ASSERT_FALSE(golden.is_discarded());
  const auto& texts = corpus["texts"];
  const auto& cases = golden["cases"];
  ASSERT_EQ(texts.size(), cases.size());
  int failures = 0;
  for (size_t i = 0; i < texts.size() && failures < 10; ++i) {
    const std::string text = texts[i].get<std::string>();
    const auto& c = cases[i];
    auto want = c["ids"].get<std::vector<int32_t>>();
    auto want_plain = c.contains("ids_plain") ? c["ids_plain"].get<std::vector<int32_t>>() : want;
    auto got = tok->encode(text, true);
    auto got_plain = tok->encode(text, false);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE(got_plain.ok()) << got_plain.status().to_string();
    if (*got != want || *got_plain != want_plain) {
      ++failures;
      ADD_FAILURE() << name << " case " << i << " " << show(text) << "\n want "
                    << nlohmann::json(want).dump() << "\n got  " << nlohmann::json(*got).dump()
                    << "\n want plain " << nlohmann::json(want_plain).dump() << "\n got plain  "
                    << nlohmann::json(*got_plain).dump();
      continue;
    }
    auto decoded = tok->decode(want, false);
    auto decoded_skip = tok->decode(want, true);
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    ASSERT_TRUE(decoded_skip.ok()) << decoded_skip.status().to_string();
    if (*decoded != c["decoded"].get<std::string>() ||
        *decoded_skip != c["decoded_skip"].get<std::string>()) {
      ++failures;
      ADD_FAILURE() << name << " case " << i << " decode " << show(text) << "\n want "
                    << show(c["decoded"]) << "\n got  " << show(*decoded) << "\n want skip "
                    << show(c["decoded_skip"]) << "\n got skip  " << show(*decoded_skip);
    }
    if (c.contains("cut")) {
      for (size_t k = 0; k < c["cut"].size(); ++k) {
        auto ids = c["cut"][k].get<std::vector<int32_t>>();
        auto cut = tok->decode(ids, false);
        ASSERT_TRUE(cut.ok()) << cut.status().to_string();
        if (*cut != c["cut_decoded"][k].get<std::string>()) {
          ++failures;
          ADD_FAILURE() << name << " case " << i << " cut decode\n want "
                        << show(c["cut_decoded"][k]) << "\n got  " << show(*cut);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TokenizerParity,
                         ::testing::Values("llama3", "qwen3", "gemma3", "deepseek_v3", "gptoss",
                                           "llama2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hearth::text
