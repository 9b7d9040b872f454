// Blob verification (see blob_verify.h).
#include "hub/blob_verify.h"

#include <openssl/evp.h>

#include <array>
#include <fstream>
#include <memory>

#include "base/hash.h"

namespace hearth::hub {

Result<std::string> git_blob_sha1_file(const std::filesystem::path& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) return io_error("{}: {}", path.string(), ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("{}: cannot open", path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha1(), nullptr) != 1) {
    return internal_error("SHA-1 unavailable");
  }
  std::string prefix = fmt::format("blob {}", size);
  EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size() + 1);  // with the NUL
  std::array<char, 1 << 16> buf{};
  while (in) {
    in.read(buf.data(), buf.size());
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest.data(), &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

Status verify_blob(const std::filesystem::path& path, const RepoFile& file) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) return io_error("{}: {}", path.string(), ec.message());
  if (size != file.size) {
    return parse_error("{}: downloaded {} bytes, the Hub lists {}", file.path, size, file.size);
  }
  if (file.lfs_sha256) {
    HEARTH_ASSIGN_OR_RETURN(std::string digest, sha256_file_hex(path.string()));
    if (digest != *file.lfs_sha256) {
      return parse_error("{}: SHA-256 mismatch: got {}, the Hub lists {}", file.path, digest,
                         *file.lfs_sha256);
    }
  } else if (!file.blob_id.empty()) {
    HEARTH_ASSIGN_OR_RETURN(std::string digest, git_blob_sha1_file(path));
    if (digest != file.blob_id) {
      return parse_error("{}: git blob id mismatch: got {}, the Hub lists {}", file.path, digest,
                         file.blob_id);
    }
  }
  return ok_status();
}

}  // namespace hearth::hub
