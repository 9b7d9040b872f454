// The byte-level alphabet: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 onwards in byte order.
#include "text/byte_level.h"

#include "text/utf8.h"

namespace hearth::text {
namespace {

constexpr ByteLevelAlphabet make_alphabet() {
  ByteLevelAlphabet a{};
  for (auto& v : a.char_to_byte) v = -1;
  uint16_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    uint16_t c = printable ? static_cast<uint16_t>(b) : next++;
    a.byte_to_char[b] = c;
    a.char_to_byte[c] = static_cast<int16_t>(b);
  }
  return a;
}

constexpr ByteLevelAlphabet kAlphabet = make_alphabet();

}  // namespace

const ByteLevelAlphabet& byte_level_alphabet() { return kAlphabet; }

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) append_utf8(out, kAlphabet.byte_to_char[static_cast<unsigned char>(ch)]);
  return out;
}

bool byte_level_decode(std::string_view chars, std::string& out) {
  size_t i = 0;
  while (i < chars.size()) {
    uint32_t cp = next_codepoint(chars, i);
    if (cp >= kAlphabet.char_to_byte.size() || kAlphabet.char_to_byte[cp] < 0) return false;
    out.push_back(static_cast<char>(kAlphabet.char_to_byte[cp]));
  }
  return true;
}

}  // namespace hearth::text
