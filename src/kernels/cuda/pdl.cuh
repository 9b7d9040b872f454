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

// A launch's configuration and its attributes (the configuration points into attrs, so it is
// neither copied nor moved): programmatic stream serialization when pdl is true (the caller
// checks the device is sm_90+), a 1-D cluster of `cluster` blocks when cluster > 1.
struct LaunchConfig {
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, int cluster) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    if (pdl) {
      attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[count].val.programmaticStreamSerializationAllowed = 1;
      ++count;
    }
    if (cluster > 1) {
      attrs[count].id = cudaLaunchAttributeClusterDimension;
      attrs[count].val.clusterDim.x = static_cast<unsigned>(cluster);
      attrs[count].val.clusterDim.y = 1;
      attrs[count].val.clusterDim.z = 1;
      ++count;
    }
    config.attrs = attrs;
    config.numAttrs = count;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;

  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attrs[2]{};
  unsigned count = 0;
};

// <<<grid, block, smem, stream>>> with the programmatic-stream-serialization attribute when
// pdl is true (the caller checks the device is sm_90+).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  LaunchConfig launch(grid, block, smem, stream, pdl, 1);
  return cudaLaunchKernelEx(&launch.config, kernel, std::forward<Args>(args)...);
}

}  // namespace hearth::cuda::detail
