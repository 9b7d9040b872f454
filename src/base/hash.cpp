// xxHash3 and SHA-256 wrappers (libxxhash, OpenSSL EVP).
#include "base/hash.h"

#include <xxhash.h>

#include <array>
#include <fstream>

#include "base/check.h"

namespace hearth {

std::uint64_t xxh3_64(std::span<const std::uint8_t> bytes, std::uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

std::uint64_t xxh3_64(std::string_view text, std::uint64_t seed) {
  return XXH3_64bits_withSeed(text.data(), text.size(), seed);
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  HEARTH_CHECK(ctx_ != nullptr, "EVP_MD_CTX_new failed");
  HEARTH_CHECK(EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(std::span<const std::uint8_t> bytes) {
  HEARTH_CHECK(EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()) == 1);
}

void Sha256::update(std::string_view text) {
  HEARTH_CHECK(EVP_DigestUpdate(ctx_, text.data(), text.size()) == 1);
}

std::string Sha256::digest_hex() {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  HEARTH_CHECK(EVP_DigestFinal_ex(ctx_, digest.data(), &len) == 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::span<const std::uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.digest_hex();
}

std::string sha256_hex(std::string_view text) {
  Sha256 h;
  h.update(text);
  return h.digest_hex();
}

Result<std::string> sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found_error("{}: cannot open for hashing", path);
  Sha256 h;
  std::array<char, 1 << 16> buf{};
  while (in) {
    in.read(buf.data(), buf.size());
    auto got = in.gcount();
    if (got > 0) {
      h.update(std::string_view(buf.data(), static_cast<std::size_t>(got)));
    }
  }
  if (in.bad()) return io_error("{}: read failed while hashing", path);
  return h.digest_hex();
}

}  // namespace hearth
