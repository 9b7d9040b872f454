// Which device a model loads onto: parsing the --device choice, asking whether a CUDA device
// is present (0 in a build without the CUDA backend), and loading onto the GPU through the
// same LoadOptions as the CPU path. Kept apart so callers need no CUDA headers.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "models/model.h"

namespace hearth {

// True when this binary was built with the CUDA backend.
bool cuda_backend_built();

// CUDA devices the runtime can see; 0 without the backend, a driver or a device.
int cuda_device_count();

// "cpu" or "cuda"; "auto" picks cuda when a device is present, else cpu. Other names are
// an invalid-argument error.
Result<Device> parse_device(std::string_view name);
std::string_view device_name(Device device);

// Loads onto the CUDA device options.device_index. A clear error when the build has no
// CUDA backend or no device is present.
Result<std::unique_ptr<Model>> load_cuda_model_from(const std::string& dir,
                                                    const LoadOptions& options);

}  // namespace hearth
