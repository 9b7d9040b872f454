// Verifies a downloaded blob against what the Hub published: the LFS sha256 for large
// files, the git blob sha1 ("blob <size>\0" + bytes) for the small ones, and the size.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"
#include "hub/hub_api.h"

namespace hearth::hub {

// sha1("blob <size>\0" + file bytes) in hex: git's object id of the file's content.
Result<std::string> git_blob_sha1_file(const std::filesystem::path& path);

// kParse (the bytes are wrong) or ok. Does not delete anything.
Status verify_blob(const std::filesystem::path& path, const RepoFile& file);

}  // namespace hearth::hub
