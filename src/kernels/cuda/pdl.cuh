// Programmatic dependent launch (sm_90+): a kernel launched with it may start while the
// previous kernel on the stream is still running; it must call grid_dependency_wait() before
// touching anything that kernel writes, and may call launch_dependents() to let the next
// kernel start early. Both are no-ops on older architectures and without the attribute.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace hearth::cuda::detail {

// Waits until the preceding grid has completed and its writes are visible.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Allows the next PDL-launched grid to be scheduled once every block has called this.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// <<<grid, block, smem, stream>>> with the programmatic-stream-serialization attribute when
// pdl is true (the caller checks the device is sm_90+).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace hearth::cuda::detail
