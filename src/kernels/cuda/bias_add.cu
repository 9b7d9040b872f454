// Bias add: elementwise over a 2-D grid, memory bound.
#include "kernels/cuda/bias_add.cuh"
#include "kernels/cuda/common.cuh"

namespace hearth::cuda {
namespace {

__global__ void bias_add_kernel(__nv_bfloat16* y, int64_t ld, const __nv_bfloat16* bias, int cols) {
  __nv_bfloat16* row = y + blockIdx.y * ld;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
    row[i] = __float2bfloat16(__bfloat162float(row[i]) + __bfloat162float(bias[i]));
  }
}

}  // namespace

cudaError_t bias_add(__nv_bfloat16* y, int64_t ld, const __nv_bfloat16* bias, int rows, int cols,
                     cudaStream_t stream) {
  if (rows < 0 || cols <= 0 || ld < cols || rows > 65535) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  dim3 grid(detail::ceil_div(cols, 1024), rows);
  bias_add_kernel<<<grid, 256, 0, stream>>>(y, ld, bias, cols);
  return cudaGetLastError();
}

}  // namespace hearth::cuda
