// GPT-2's byte <-> character bijection used by byte-level BPE: every byte maps to one
// printable code point, so any byte string becomes a string of vocabulary characters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::text {

struct ByteLevelAlphabet {
  std::array<uint16_t, 256> byte_to_char{};   // byte -> code point (all < 0x200)
  std::array<int16_t, 0x200> char_to_byte{};  // code point -> byte, or -1
};

// The fixed table (a pure function of the GPT-2 rule; computed at compile time).
const ByteLevelAlphabet& byte_level_alphabet();

// Maps raw bytes to their byte-level characters (UTF-8).
std::string byte_level_encode(std::string_view bytes);

// Maps a string of byte-level characters back to bytes; false when a character is outside
// the alphabet (then `out` is unspecified).
bool byte_level_decode(std::string_view chars, std::string& out);

}  // namespace hearth::text
