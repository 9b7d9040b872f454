// The device flags every verb that loads a model shares (--device, --compiled-decode,
// --memory-budget): registering them on a subcommand and turning them into LoadOptions, so
// generate, benchmark, perplexity and serve spell and check them the same way.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "base/status.h"
#include "models/model.h"

namespace hearth::cli {

// --cpu-int8-dot's default (on | off): int8 activations x quantized weights on CPU.
inline constexpr const char* kCpuInt8DotDefault = "on";
// --cpu-bf16-dot's default (on | off): bf16 activations x bf16 weights in CPU prefill.
inline constexpr const char* kCpuBf16DotDefault = "off";

struct DeviceArgs {
  std::string device = "auto";                    // auto | cuda | cpu
  std::string compiled_decode = "on";             // on | off
  double memory_budget_gb = 0;                    // decimal GB; 0 = no cap
  std::string cpu_int8_dot = kCpuInt8DotDefault;  // on | off
  std::string cpu_bf16_dot = kCpuBf16DotDefault;  // on | off
  std::string batch_invariant = "auto";           // auto | on | off
};

// Adds --device, --compiled-decode, --memory-budget, --cpu-int8-dot, --cpu-bf16-dot and
// --batch-invariant (alias --cpu-batch-invariant) to `cmd`, bound to `args`.
void add_device_flags(CLI::App* cmd, DeviceArgs& args);

// Adds --cpu-int8-dot on|off to `cmd` (verbs that run on CPU only use it alone).
void add_cpu_int8_dot_flag(CLI::App* cmd, std::string& value);

// Adds --cpu-bf16-dot on|off to `cmd`.
void add_cpu_bf16_dot_flag(CLI::App* cmd, std::string& value);

// LoadOptions for the chosen device. "auto" is cuda when this build has the CUDA backend
// and a device is visible, else cpu. --device cuda without one is an error here, before
// any file is read.
Result<LoadOptions> device_load_options(const DeviceArgs& args, int threads);

// On CPU, --memory-budget caps the weights plus `kv_bytes` of KV (the GPU path enforces
// it in its allocator); an error naming both figures when they do not fit.
Status check_host_memory_budget(const LoadOptions& options, const Model& model, uint64_t kv_bytes);

// "cuda" or "cpu", for reports.
std::string device_label(const LoadOptions& options);

}  // namespace hearth::cli
