// Property tests on random input: any valid UTF-8 round-trips exactly through a byte-level
// tokenizer with no normalizer (llama3), random bytes never crash encode, and random ids
// never crash decode or the streaming decoder (whose output stays valid UTF-8).
#include <gtest/gtest.h>

#include <random>

#include "text/streaming_decoder.h"
#include "text/utf8.h"
#include "tokenizer_test_util.h"

namespace hearth::text {
namespace {

std::string random_text(std::mt19937& rng, size_t chars) {
  // Mostly ASCII and spaces, with runs from many scripts, emoji, marks and controls.
  static constexpr std::pair<uint32_t, uint32_t> kRanges[] = {
      {0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x24F},    {0x300, 0x36F},     {0x400, 0x4FF},
      {0x590, 0x6FF},   {0x900, 0x97F},   {0xE00, 0xE7F},   {0x2000, 0x206F},   {0x3040, 0x30FF},
      {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF}, {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF},
  };
  std::uniform_int_distribution<size_t> pick(0, std::size(kRanges) - 1);
  std::string out;
  for (size_t i = 0; i < chars; ++i) {
    auto [lo, hi] = kRanges[i % 3 == 0 ? pick(rng) : 0];
    uint32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';  // surrogates are not characters
    append_utf8(out, cp);
  }
  return out;
}

TEST(TokenizerRobustness, RandomUnicodeRoundTripsAndRandomBytesNeverCrash) {
  auto tok = load_test_tokenizer("llama3");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::mt19937 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::string text = random_text(rng, 1 + round % 97);
    auto ids = tok->encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    auto back = tok->decode(*ids, false);
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(*back, text) << "round " << round;
  }
  for (int round = 0; round < 300; ++round) {
    std::string bytes(1 + round % 50, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    auto ids = tok->encode(bytes, true);
    if (find_invalid_utf8(bytes) == std::string::npos) {
      EXPECT_TRUE(ids.ok());
    } else {
      EXPECT_FALSE(ids.ok());
    }
  }
}

TEST(TokenizerRobustness, RandomIdsDecodeAndStreamSafely) {
  for (const char* name : {"llama2", "qwen3"}) {
    auto tok = load_test_tokenizer(name);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    std::mt19937 rng(99);
    std::uniform_int_distribution<int32_t> any_id(-3, tok->vocab_size() + 3);
    std::uniform_int_distribution<int32_t> byte_id(0, 300);  // byte tokens live low in both
    for (int round = 0; round < 200; ++round) {
      std::vector<int32_t> ids(1 + round % 40);
      for (int32_t& id : ids) id = round % 2 ? any_id(rng) : byte_id(rng);
      auto text = tok->decode(ids, round % 3 == 0);
      ASSERT_TRUE(text.ok());
      EXPECT_EQ(find_invalid_utf8(*text), std::string::npos);
      StreamingDecoder stream(*tok, round % 3 == 0);
      std::string streamed;
      for (int32_t id : ids) {
        std::string piece = stream.push(id);
        ASSERT_EQ(find_invalid_utf8(piece), std::string::npos);
        streamed += piece;
      }
      streamed += stream.flush();
      EXPECT_EQ(find_invalid_utf8(streamed), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace hearth::text
