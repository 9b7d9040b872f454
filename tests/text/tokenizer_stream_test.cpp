// StreamingDecoder over every corpus line of every real tokenizer: each push releases whole
// characters only, and the pieces concatenate to the full decode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "text/streaming_decoder.h"
#include "text/utf8.h"
#include "tokenizer_test_util.h"

namespace hearth::text {
namespace {

class StreamingDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingDecode, ConcatenationEqualsFullDecodeAndNoHalfCharacters) {
  Result<Tokenizer> tok = load_test_tokenizer(GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto golden = read_fixture(GetParam() + ".json");
  ASSERT_FALSE(golden.is_discarded());
  for (bool skip : {false, true}) {
    for (const auto& c : golden["cases"]) {
      auto ids = c["ids"].get<std::vector<int32_t>>();
      StreamingDecoder stream(*tok, skip);
      std::string streamed;
      for (int32_t id : ids) {
        std::string piece = stream.push(id);
        ASSERT_EQ(find_invalid_utf8(piece), std::string::npos);
        streamed += piece;
      }
      streamed += stream.flush();
      auto full = tok->decode(ids, skip);
      ASSERT_TRUE(full.ok());
      EXPECT_EQ(streamed, *full) << "ids " << nlohmann::json(ids).dump() << " skip " << skip;
    }
  }
  // Emoji and CJK usually span several tokens (byte-level pieces or byte fallback).
  const std::string text = "🤖🇯🇵 👨‍👩‍👧 漢字 ok";
  auto ids = tok->encode(text, false);
  ASSERT_TRUE(ids.ok());
  StreamingDecoder stream(*tok, false);
  std::string streamed;
  for (int32_t id : *ids) {
    std::string piece = stream.push(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "released a replacement char";
    streamed += piece;
  }
  streamed += stream.flush();
  auto full = tok->decode(*ids, false);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(streamed, *full);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, StreamingDecode,
                         ::testing::Values("llama3", "qwen3", "gemma3", "deepseek_v3", "gptoss",
                                           "llama2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hearth::text
