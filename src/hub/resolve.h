// Model resolution shared by every verb that takes a model: a path, an exact repo id
// (optionally org/name@revision), or a fuzzy query over downloaded models ("8B", "qwen3").
// An ambiguous query lists the candidates; a repo id not downloaded says how to get it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "base/status.h"

namespace hearth::hub {

struct ResolvedModel {
  std::filesystem::path dir;  // the model directory (a snapshot, a path, or the starter)
  std::string repo_id;        // empty for a path
  std::string commit;         // the snapshot's commit, empty for a path
  std::string source;         // "path", "cache" or "starter"
};

// Errors: kNotFound (nothing matches; the message says what to do), kInvalidArgument
// (ambiguous: the message lists the candidates).
Result<ResolvedModel> resolve_model(std::string_view query,
                                    const std::filesystem::path& cache_root);

// The newest downloaded model (by snapshot time) when there is one, else the starter.
Result<ResolvedModel> default_model(const std::filesystem::path& cache_root);

// $HEARTH_STARTER_DIR, else <dir of the hearth executable>/../../models/starter (build/bin
// in a checkout), else <exe dir>/../share/hearth/models/starter (an install).
Result<std::filesystem::path> starter_model_dir();

}  // namespace hearth::hub
