// --device / --compiled-decode / --memory-budget: one definition of their text, choices
// and checks for every verb that loads a model.
#include "cli/device_flags.h"

#include <cmath>

#include "models/device.h"

namespace hearth::cli {

void add_device_flags(CLI::App* cmd, DeviceArgs& args) {
  cmd->add_option("--device", args.device,
                  "Where the model runs: cuda, cpu, or auto (cuda when this build has the CUDA "
                  "backend and a GPU is visible, else cpu)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--compiled-decode", args.compiled_decode,
                  "CUDA: capture decode steps as CUDA graphs and replay them (output is "
                  "bit-identical to eager)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--memory-budget", args.memory_budget_gb,
                  "Cap in GB (decimal) on the memory the model may use for weights + KV + "
                  "scratch: device memory on CUDA, RAM for the KV pool on CPU; 0 = no cap")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add_cpu_int8_dot_flag(cmd, args.cpu_int8_dot);
  add_cpu_bf16_dot_flag(cmd, args.cpu_bf16_dot);
  cmd->add_option("--batch-invariant,--cpu-batch-invariant", args.batch_invariant,
                  "A request's tokens do not depend on what shares its batch. CPU, 4/8-bit "
                  "models with --cpu-int8-dot on: codes re-laid out by 16 rows, decode in the "
                  "prefill GEMM's order; float weights: a 16-row-interleaved copy read in the "
                  "cache-blocked GEMM's order at every row count. CUDA, bf16 models: GEMMs that do "
                  "not split k and "
                  "every query on the tensor-core attention kernel in fixed key splits (slower; "
                  "quantized models refused). "
                  "auto: on for CPU "
                  "models on the int8 path, otherwise off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
}

void add_cpu_bf16_dot_flag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--cpu-bf16-dot", value,
                  "CPU, bf16 models: in prefill, round activations to bf16 and multiply with "
                  "AVX512-BF16 dot products (ignored without it). Faster; outputs differ "
                  "slightly from f32 compute")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

void add_cpu_int8_dot_flag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--cpu-int8-dot", value,
                  "CPU, 4/8-bit models: round activations to int8 per weight group and multiply "
                  "with integer dot products (AVX512-VNNI; ignored without it). Faster; outputs "
                  "differ slightly from f32 compute")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

Result<LoadOptions> device_load_options(const DeviceArgs& args, int threads) {
  LoadOptions options;
  options.threads = threads;
  options.kernels = KernelKind::kCpu;
  HEARTH_ASSIGN_OR_RETURN(options.device, parse_device(args.device));
  if (options.device == Device::kCuda) {
    if (!cuda_backend_built()) {
      return unavailable_error(
          "--device cuda: this hearth was built without the CUDA backend (rebuild with "
          "-DHEARTH_CUDA=ON) — use --device cpu");
    }
    if (cuda_device_count() == 0) {
      return unavailable_error(
          "--device cuda: no CUDA device is visible (no GPU, or no driver) — use --device cpu");
    }
  }
  if (args.compiled_decode != "on" && args.compiled_decode != "off") {
    return invalid_argument_error("--compiled-decode must be on or off, got '{}'",
                                  args.compiled_decode);
  }
  options.compiled_decode = args.compiled_decode == "on";
  if (args.cpu_int8_dot != "on" && args.cpu_int8_dot != "off") {
    return invalid_argument_error("--cpu-int8-dot must be on or off, got '{}'", args.cpu_int8_dot);
  }
  options.cpu_int8_dot = args.cpu_int8_dot == "on";
  if (args.cpu_bf16_dot != "on" && args.cpu_bf16_dot != "off") {
    return invalid_argument_error("--cpu-bf16-dot must be on or off, got '{}'", args.cpu_bf16_dot);
  }
  options.cpu_bf16_dot = args.cpu_bf16_dot == "on";
  if (args.batch_invariant != "auto" && args.batch_invariant != "on" &&
      args.batch_invariant != "off") {
    return invalid_argument_error("--batch-invariant must be auto, on or off, got '{}'",
                                  args.batch_invariant);
  }
  // auto: load turns it on where it costs about nothing (a CPU model on the int8 path:
  // benchmarks/RESULTS.md, S21-C2) and leaves it off for float weights on the CPU (decode
  // 0.86-0.99x of off on issue 4's host, S25-R2/R3) and on CUDA (batch-1 decode 0.83x, long
  // prefills 0.84-0.89x). The bf16
  // prefill GEMM (--cpu-bf16-dot on) rounds activations that decode does not: it cannot be
  // combined with on.
  if (args.batch_invariant == "on" && options.device == Device::kCpu && options.cpu_bf16_dot) {
    return invalid_argument_error(
        "--batch-invariant on cannot be combined with --cpu-bf16-dot on (its bf16 prefill "
        "activations give a decode row other sums inside a batch); drop one of them");
  }
  options.batch_invariant = args.batch_invariant == "on";
  options.batch_invariant_auto = args.batch_invariant == "auto";
  if (!(args.memory_budget_gb >= 0) || !std::isfinite(args.memory_budget_gb)) {
    return invalid_argument_error("--memory-budget must be a finite number >= 0");
  }
  options.memory_budget_bytes = static_cast<uint64_t>(args.memory_budget_gb * 1e9);
  options.show_progress = true;
  return options;
}

Status check_host_memory_budget(const LoadOptions& options, const Model& model, uint64_t kv_bytes) {
  if (options.device != Device::kCpu || options.memory_budget_bytes == 0) return ok_status();
  const uint64_t need = model.weight_bytes() + kv_bytes;
  if (need <= options.memory_budget_bytes) return ok_status();
  return out_of_memory_error("weights {:.2f} GB + KV {:.2f} GB exceed --memory-budget {:.2f} GB",
                             static_cast<double>(model.weight_bytes()) * 1e-9,
                             static_cast<double>(kv_bytes) * 1e-9,
                             static_cast<double>(options.memory_budget_bytes) * 1e-9);
}

std::string device_label(const LoadOptions& options) {
  return std::string(device_name(options.device));
}

}  // namespace hearth::cli
