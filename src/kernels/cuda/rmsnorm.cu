// RMSNorm + residual add: one block per row; the row is read twice (the second read hits
// L1/L2), written once to the residual and once to the output.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/rmsnorm.cuh"

namespace hearth::cuda {
namespace {

__global__ void rmsnorm_residual_kernel(const __nv_bfloat16* delta, int64_t ld_delta,
                                        __nv_bfloat16* residual, int64_t ld_residual,
                                        const __nv_bfloat16* weight, float weight_offset, float eps,
                                        __nv_bfloat16* out, int64_t ld_out, int dim) {
  __shared__ float scratch[32];
  int row = blockIdx.x;
  __nv_bfloat16* res = residual + row * ld_residual;
  float sum_sq = 0.0f;
  if (delta != nullptr) {
    const __nv_bfloat16* d = delta + row * ld_delta;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      __nv_bfloat16 sum = __float2bfloat16(__bfloat162float(res[i]) + __bfloat162float(d[i]));
      res[i] = sum;
      float v = __bfloat162float(sum);
      sum_sq += v * v;
    }
  } else {
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      float v = __bfloat162float(res[i]);
      sum_sq += v * v;
    }
  }
  float total = detail::block_sum(sum_sq, scratch);
  float inv_rms = rsqrtf(total / static_cast<float>(dim) + eps);
  __nv_bfloat16* o = out + row * ld_out;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float w = __bfloat162float(weight[i]) + weight_offset;
    o[i] = __float2bfloat16(__bfloat162float(res[i]) * inv_rms * w);
  }
}

}  // namespace

cudaError_t rmsnorm_residual(const __nv_bfloat16* delta, int64_t ld_delta, __nv_bfloat16* residual,
                             int64_t ld_residual, const __nv_bfloat16* weight, float weight_offset,
                             float eps, __nv_bfloat16* out, int64_t ld_out, int rows, int dim,
                             cudaStream_t stream) {
  if (rows < 0 || dim <= 0 || ld_residual < dim || ld_out < dim ||
      (delta != nullptr && ld_delta < dim)) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const int threads = detail::rmsnorm_threads(dim);
  rmsnorm_residual_kernel<<<rows, threads, 0, stream>>>(
      delta, ld_delta, residual, ld_residual, weight, weight_offset, eps, out, ld_out, dim);
  return cudaGetLastError();
}

}  // namespace hearth::cuda
