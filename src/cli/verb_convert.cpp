// `hearth convert <model> [--mlx-path DIR] [-q] [--q-bits 4|8] [--q-group-size 32|64|128]`:
// quantizes a full-precision model into the MLX affine format (mlx_lm.convert's flags and
// layout) with hearth's own quantizer, writing a directory any verb can load.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/clock.h"
#include "base/mapped_file.h"
#include "cli/verb.h"
#include "hub/hub_config.h"
#include "hub/resolve.h"
#include "models/quantize.h"
#include "models/safetensors.h"

namespace hearth::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertArgs {
  std::string model;
  std::string mlx_path = "mlx_model";
  bool quantize = false;  // accepted as mlx_lm spells it; convert always quantizes
  int bits = 4;
  int group_size = 64;
  bool force = false;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "hearth convert: %s\n", message.c_str());
  return kExitFailure;
}

int usage(const std::string& message) {
  std::fprintf(stderr, "hearth convert: %s\n", message.c_str());
  return kExitUsage;
}

// An error when the source is already quantized (an MLX "quantization" block, or any
// "quantization_config" such as GPTQ / AWQ / FP8 checkpoints carry).
Status check_unquantized_config(const fs::path& dir) {
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_file((dir / "config.json").string()));
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return parse_error("{}/config.json: invalid JSON", dir.string());
  }
  for (const char* key : {"quantization", "quantization_config"}) {
    if (!config.contains(key)) continue;
    const nlohmann::json& q = config[key];
    std::string what = "quantized";
    if (q.is_object() && q.contains("bits") && q.contains("group_size")) {
      what = fmt::format("quantized ({}-bit, group {})", q["bits"].dump(), q["group_size"].dump());
    } else if (q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()) {
      what = fmt::format("quantized ({})", q["quant_method"].get<std::string>());
    }
    return invalid_argument_error(
        "{} is already {}; convert needs a full-precision (f32 / bf16 / f16) model", dir.string(),
        what);
  }
  return ok_status();
}

// The float type of the source's matrices: scales and biases are stored in it, as mlx_lm
// stores them in the model's dtype. An error when the weights hold packed integers.
Result<DType> source_float_dtype(const fs::path& dir) {
  HEARTH_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open(dir.string()));
  std::optional<DType> found;
  for (const std::string& name : store.names()) {
    if (name.ends_with(".scales")) {
      return invalid_argument_error(
          "{} is already quantized (it holds {}); convert needs a full-precision model",
          dir.string(), name);
    }
    HEARTH_ASSIGN_OR_RETURN(TensorView t, store.get(name));
    if (found || t.shape.rank() != 2) continue;
    if (t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16) {
      found = t.dtype;
    }
  }
  if (!found) return invalid_argument_error("{} has no f32 / bf16 / f16 matrices", dir.string());
  return *found;
}

// An existing output directory is replaced only with --force, and only when it is empty or
// holds a model (config.json): --force never deletes an unrelated folder.
Status check_destination(const fs::path& dst, const fs::path& src, bool force) {
  std::error_code ec;
  if (!fs::exists(dst, ec)) return ok_status();
  if (fs::equivalent(dst, src, ec)) {
    return invalid_argument_error("--mlx-path {} is the source model itself", dst.string());
  }
  if (!force) {
    return already_exists_error("{} already exists; choose another --mlx-path or pass --force",
                                dst.string());
  }
  if (!fs::is_directory(dst, ec)) {
    return invalid_argument_error("{} exists and is not a directory; not replacing it",
                                  dst.string());
  }
  if (!fs::is_empty(dst, ec) && !fs::exists(dst / "config.json", ec)) {
    return invalid_argument_error(
        "{} is not empty and holds no config.json; --force replaces only a model directory",
        dst.string());
  }
  return ok_status();
}

std::string human_bytes(std::uintmax_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024.0 * 1024.0)
    return fmt::format("{:.2f} GiB", b / (1024.0 * 1024.0 * 1024.0));
  if (b >= 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

std::uintmax_t dir_bytes(const fs::path& dir) {
  std::uintmax_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) total += entry.file_size(ec);
  }
  return total;
}

int run_convert(const ConvertArgs& args) {
  if (args.bits != 4 && args.bits != 8) {
    return usage(fmt::format("--q-bits must be 4 or 8 (got {})", args.bits));
  }
  if (args.group_size != 32 && args.group_size != 64 && args.group_size != 128) {
    return usage(fmt::format("--q-group-size must be 32, 64 or 128 (got {})", args.group_size));
  }
  if (args.mlx_path.empty()) return usage("--mlx-path must not be empty");

  const hub::HubConfig hub = hub::hub_config_from_env();
  auto resolved = hub::resolve_model(args.model, hub.cache_dir);
  if (!resolved.ok()) return fail(resolved.status().message());
  const fs::path src = resolved->dir;
  if (Status st = check_unquantized_config(src); !st.ok()) return fail(st.message());
  auto dtype = source_float_dtype(src);
  if (!dtype.ok()) return fail(dtype.status().message());

  const fs::path dst = fs::absolute(args.mlx_path).lexically_normal();
  if (Status st = check_destination(dst, src, args.force); !st.ok()) return fail(st.message());

  // Written beside the destination and renamed into place, so that an interrupted run never
  // leaves a half-written model under the requested name.
  std::error_code ec;
  const fs::path parent = dst.parent_path();
  fs::create_directories(parent, ec);
  if (ec) return fail(fmt::format("cannot create {}: {}", parent.string(), ec.message()));
  const fs::path partial =
      parent / fmt::format(".{}.partial-{}", dst.filename().string(), static_cast<int>(getpid()));
  fs::remove_all(partial, ec);

  const bool terminal = isatty(STDERR_FILENO) == 1;
  const QuantizeProgress progress = [terminal](int done, int total, const std::string& name) {
    if (!terminal) return;
    const std::string what = done == total ? "writing " + name : name;
    std::fprintf(stderr, "\r\033[Kquantizing [%d/%d] %s", done, total, what.c_str());
    std::fflush(stderr);
  };
  const QuantSpec spec{args.bits, args.group_size};
  const Stopwatch watch;
  Status st = quantize_model_dir(src.string(), partial.string(), spec, *dtype, progress);
  if (terminal) std::fputs("\r\033[K", stderr);
  if (!st.ok()) {
    fs::remove_all(partial, ec);
    return fail(st.message());
  }
  if (fs::exists(dst, ec)) {
    fs::remove_all(dst, ec);
    if (ec) {
      fs::remove_all(partial, ec);
      return fail(fmt::format("cannot replace {}: {}", dst.string(), ec.message()));
    }
  }
  fs::rename(partial, dst, ec);
  if (ec) {
    fs::remove_all(partial, ec);
    return fail(fmt::format("cannot move the output to {}: {}", dst.string(), ec.message()));
  }
  std::fprintf(stderr, "hearth convert: %s -> %s: %d-bit, group %d, %s (from %s) in %.1f s\n",
               resolved->repo_id.empty() ? src.c_str() : resolved->repo_id.c_str(), dst.c_str(),
               args.bits, args.group_size, human_bytes(dir_bytes(dst)).c_str(),
               human_bytes(dir_bytes(src)).c_str(), watch.elapsed_seconds());
  return kExitOk;
}

}  // namespace

Verb add_convert_verb(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Quantize a model to MLX 4-bit or 8-bit");
  cmd->add_option("model,--hf-path", args->model,
                  "Model: a directory, a repo id or a query over downloaded models")
      ->required();
  cmd->add_option("--mlx-path,-o", args->mlx_path, "Output directory")->capture_default_str();
  cmd->add_flag("-q,--quantize", args->quantize, "Quantize (the default: convert always does)");
  cmd->add_option("--q-bits", args->bits, "Bits per weight: 4 or 8")->capture_default_str();
  cmd->add_option("--q-group-size", args->group_size, "Weights per scale: 32, 64 or 128")
      ->capture_default_str();
  cmd->add_flag("--force", args->force, "Replace an existing output model directory");
  return Verb{cmd, [args] { return run_convert(*args); }};
}

}  // namespace hearth::cli
