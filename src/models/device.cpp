// Device choice and the CUDA dispatch of load_model. Compiled in every build; the CUDA parts
// only where HEARTH_HAVE_CUDA is defined (the backend is built), so a CPU-only build answers
// "no CUDA" with a clear error instead of failing to link.
#include "models/device.h"

#include <fmt/format.h>

#ifdef HEARTH_HAVE_CUDA
#include <cuda_runtime.h>

#include "models/cuda/cuda_llama_model.h"
#endif

namespace hearth {

bool cuda_backend_built() {
#ifdef HEARTH_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef HEARTH_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

Result<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  if (name == "auto") return cuda_device_count() > 0 ? Device::kCuda : Device::kCpu;
  return invalid_argument_error("unknown device '{}' (expected cuda, cpu or auto)", name);
}

std::string_view device_name(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

Result<std::unique_ptr<Model>> load_cuda_model_from(const std::string& dir,
                                                    const LoadOptions& options) {
#ifdef HEARTH_HAVE_CUDA
  const int count = cuda_device_count();
  if (count == 0) {
    return unavailable_error("--device cuda: no CUDA device is visible (driver or GPU missing)");
  }
  if (options.device_index < 0 || options.device_index >= count) {
    return invalid_argument_error("CUDA device {} does not exist ({} visible)",
                                  options.device_index, count);
  }
  CudaLoadOptions cuda;
  cuda.device = options.device_index;
  cuda.memory_budget = options.memory_budget_bytes;
  cuda.show_progress = options.show_progress;
  cuda.compiled_decode = options.compiled_decode;
  cuda.batch_invariant = options.batch_invariant;
  return load_cuda_model(dir, cuda);
#else
  (void)dir;
  (void)options;
  return unavailable_error(
      "--device cuda: this hearth was built without the CUDA backend (configure with "
      "-DHEARTH_CUDA=ON)");
#endif
}

Status Model::forward_sample(const ForwardBatch&, std::span<const RowSampling>, std::span<int32_t>,
                             std::span<float>) {
  return unsupported_error("this model does not sample on the device (use forward)");
}

}  // namespace hearth
