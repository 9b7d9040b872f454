// UTF-8 decoding/encoding and the few Unicode character properties the tokenizer needs,
// defined as HuggingFace tokenizers (Rust `char` methods) define them, so splits and
// strips agree with the reference byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::text {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the valid UTF-8 sequence starting at s[i] (1-4), or -k when the bytes there are
// invalid, k being how many bytes one U+FFFD replaces (Rust from_utf8_lossy's rule).
int utf8_sequence_length(std::string_view s, size_t i);

// Byte offset of the first invalid UTF-8 sequence in `s`, or npos when it is all valid.
size_t find_invalid_utf8(std::string_view s);

// `bytes` as valid UTF-8: each maximal invalid subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Decodes the code point at s[i] of valid UTF-8 and advances i past it.
inline uint32_t next_codepoint(std::string_view s, size_t& i) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  auto cont = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F);
  };
  uint32_t cp;
  if (b0 < 0xE0) {
    cp = ((b0 & 0x1Fu) << 6) | cont(1);
    i += 2;
  } else if (b0 < 0xF0) {
    cp = ((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
  } else {
    cp = ((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
  }
  return cp;
}

// Byte length of the UTF-8 sequence led by `lead` (valid UTF-8 assumed).
inline size_t utf8_length_of_lead(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

void append_utf8(std::string& out, uint32_t cp);

// Rust char::is_whitespace (the White_Space property).
bool is_whitespace(uint32_t cp);
// Rust char::is_numeric (general categories Nd, Nl, No).
bool is_numeric(uint32_t cp);
// Rust char::is_alphanumeric (letters and numbers).
bool is_alphanumeric(uint32_t cp);
// HF tokenizers' is_punc: ASCII punctuation (symbols too) or Unicode categories P*.
bool is_punctuation(uint32_t cp);
// General category Mn (nonspacing mark), what StripAccents removes.
bool is_nonspacing_mark(uint32_t cp);

}  // namespace hearth::text
