// Hashing: xxHash3 for content addressing (prefix-cache block names, fingerprints) and
// SHA-256 for integrity against published digests (Hub LFS oids, SSD cache files).
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace hearth {

std::uint64_t xxh3_64(std::span<const std::uint8_t> bytes, std::uint64_t seed = 0);
std::uint64_t xxh3_64(std::string_view text, std::uint64_t seed = 0);

// Incremental SHA-256. digest_hex() finishes the hash; the object is then spent.
class Sha256 {
 public:
  Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  ~Sha256();

  void update(std::span<const std::uint8_t> bytes);
  void update(std::string_view text);
  std::string digest_hex();  // 64 lowercase hex characters

 private:
  EVP_MD_CTX* ctx_;
};

std::string sha256_hex(std::span<const std::uint8_t> bytes);
std::string sha256_hex(std::string_view text);
// Streams the file through SHA-256 without loading it whole.
Result<std::string> sha256_file_hex(const std::string& path);

}  // namespace hearth
