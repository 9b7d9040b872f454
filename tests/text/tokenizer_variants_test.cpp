// Components the real tokenizer files do not exercise (Metaspace, Digits, Punctuation,
// Whitespace, every Split behavior, NFKC/NFD/Lowercase/Strip/..., TemplateProcessing with
// EOS, Bert post-processing, added-token flags, decoders), each swapped into a reduced real
// tokenizer and checked against HF tokenizers' goldens (tools/gen_tokenizer_goldens.mjs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hearth::text {
namespace {

std::string show(const nlohmann::json& v) { return v.dump(); }

TEST(TokenizerVariants, MatchReferenceForEveryComponent) {
  auto fixture = read_fixture("variants.json");
  ASSERT_FALSE(fixture.is_discarded()) << "tests/fixtures/tokenizers/variants.json";
  const auto& texts = fixture["texts"];
  ASSERT_GT(fixture["variants"].size(), 20u);
  for (const auto& variant : fixture["variants"]) {
    const std::string name = variant["name"].get<std::string>();
    SCOPED_TRACE(name);
    nlohmann::json config = fixture["bases"][variant["base"].get<std::string>()];
    for (auto it = variant["overrides"].begin(); it != variant["overrides"].end(); ++it) {
      config[it.key()] = it.value();
    }
    auto tok = Tokenizer::from_json_text(config.dump());
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const auto& cases = variant["cases"];
    ASSERT_EQ(cases.size(), texts.size());
    int failures = 0;
    for (size_t i = 0; i < cases.size() && failures < 5; ++i) {
      const std::string text = texts[i].get<std::string>();
      const auto& c = cases[i];
      auto want = c["ids"].get<std::vector<int32_t>>();
      auto want_plain = c.contains("ids_plain") ? c["ids_plain"].get<std::vector<int32_t>>() : want;
      std::string want_decoded = c.value("decoded", text);
      std::string want_skip = c.value("decoded_skip", want_decoded);
      auto got = tok->encode(text, true);
      auto got_plain = tok->encode(text, false);
      ASSERT_TRUE(got.ok() && got_plain.ok());
      auto decoded = tok->decode(want, false);
      auto skip = tok->decode(want, true);
      ASSERT_TRUE(decoded.ok() && skip.ok());
      if (*got != want || *got_plain != want_plain || *decoded != want_decoded ||
          *skip != want_skip) {
        ++failures;
        ADD_FAILURE() << name << " case " << i << " " << show(text) << "\n want " << show(want)
                      << "\n got  " << show(*got) << "\n want plain " << show(want_plain)
                      << "\n got plain  " << show(*got_plain) << "\n want decoded "
                      << show(want_decoded) << "\n got decoded  " << show(*decoded)
                      << "\n want skip " << show(want_skip) << "\n got skip  " << show(*skip);
      }
    }
  }
}

TEST(TokenizerVariants, UnsupportedComponentsFailTheLoadByName) {
  auto fixture = read_fixture("variants.json");
  ASSERT_FALSE(fixture.is_discarded());
  const nlohmann::json base = fixture["bases"]["qwen"];
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* message;
  };
  const Case cases[] = {
      {"normalizer", {{"type", "Precompiled"}}, "unsupported normalizer type 'Precompiled'"},
      {"pre_tokenizer",
       {{"type", "UnicodeScripts"}},
       "unsupported pre_tokenizer type 'UnicodeScripts'"},
      {"post_processor", {{"type", "Frobnicate"}}, "unsupported post_processor type 'Frobnicate'"},
      {"decoder", {{"type", "CTC"}}, "unsupported decoder type 'CTC'"},
      {"model",
       {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}},
       "unsupported model type 'WordPiece'"},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
       "does not compile"},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}},
       "unsupported split behavior 'Sideways'"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = base;
    config[c.field] = c.value;
    auto tok = Tokenizer::from_json_text(config.dump());
    ASSERT_FALSE(tok.ok()) << c.message;
    EXPECT_NE(tok.status().message().find(c.message), std::string::npos) << tok.status().message();
  }
  // Malformed files are parse errors, never crashes.
  for (const char* bad : {"", "{", "[1,2]", "{\"model\": 3}", "{\"model\": {\"type\": \"BPE\"}}",
                          "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": "
                          "[\"a b c\"]}}",
                          "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": "
                          "[\"a a\"]}}"}) {
    EXPECT_FALSE(Tokenizer::from_json_text(bad).ok()) << bad;
  }
}

TEST(TokenizerVariants, InvalidUtf8IsAClearError) {
  auto fixture = read_fixture("variants.json");
  ASSERT_FALSE(fixture.is_discarded());
  auto tok = Tokenizer::from_json_text(fixture["bases"]["llama"].dump());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  for (std::string bad : {std::string("\xFF"), std::string("ab\xC3"), std::string("\xED\xA0\x80"),
                          std::string("\xF4\x90\x80\x80"), std::string("x\xC0\xAFy")}) {
    auto ids = tok->encode(bad, true);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("not valid UTF-8"), std::string::npos);
  }
  // Ids with no token decode to nothing, as in the reference.
  auto with_unknown = tok->decode(std::vector<int32_t>{-5, 1, 999999}, false);
  ASSERT_TRUE(with_unknown.ok());
  EXPECT_EQ(*with_unknown, *tok->decode(std::vector<int32_t>{1}, false));
}

}  // namespace
}  // namespace hearth::text
