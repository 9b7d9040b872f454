// Soft-capping: elementwise, memory bound.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softcap.cuh"

namespace hearth::cuda {
namespace {

__global__ void softcap_kernel(float* logits, int64_t ld, int cols, float cap) {
  float* row = logits + blockIdx.y * ld;
  float inv_cap = 1.0f / cap;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
    row[i] = cap * tanhf(row[i] * inv_cap);
  }
}

}  // namespace

cudaError_t softcap(float* logits, int64_t ld, int rows, int cols, float cap, cudaStream_t stream) {
  if (rows < 0 || cols <= 0 || ld < cols || !(cap > 0.0f) || rows > 65535) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  dim3 grid(detail::ceil_div(cols, 1024), rows);
  softcap_kernel<<<grid, 256, 0, stream>>>(logits, ld, cols, cap);
  return cudaGetLastError();
}

}  // namespace hearth::cuda
