// RMSNorm + residual add: one block per row. Rows of up to 8 elements a thread stay in
// registers (read once); longer rows are read twice (the second read hits L1/L2). Written once
// to the residual and once to the output.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rmsnorm.cuh"

namespace hearth::cuda {
namespace {

// Elements a thread keeps in registers between the sum and the scaling pass (dim <= 8 x the
// block: every hidden size up to 8192 at 1024 threads).
constexpr int kCached = 8;

__global__ void rmsnorm_residual_kernel(const __nv_bfloat16* delta, int64_t ld_delta,
                                        __nv_bfloat16* residual, int64_t ld_residual,
                                        const __nv_bfloat16* weight, float weight_offset, float eps,
                                        __nv_bfloat16* out, int64_t ld_out, int dim) {
  __shared__ float scratch[32];
  int row = blockIdx.x;
  __nv_bfloat16* res = residual + row * ld_residual;
  const __nv_bfloat16* d = delta != nullptr ? delta + row * ld_delta : nullptr;
  __nv_bfloat16* o = out + row * ld_out;
  float sum_sq = 0.0f;
  if (dim <= kCached * static_cast<int>(blockDim.x)) {
    // Every load of the row is issued before the first use (the row's residual is written in
    // place, so the compiler cannot hoist the loads of the loop below), then the same sums in
    // the same order as the general path: the same bits.
    float wv[kCached];  // the weights (no kernel writes them) load before the PDL wait
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      wv[j] = i < dim ? __bfloat162float(weight[i]) + weight_offset : 0.0f;
    }
    detail::grid_dependency_wait();  // a PDL launch: the previous kernel's writes first
    float v[kCached];
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      v[j] = i < dim ? __bfloat162float(res[i]) : 0.0f;
    }
    if (d != nullptr) {
      float dv[kCached];
#pragma unroll
      for (int j = 0; j < kCached; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        dv[j] = i < dim ? __bfloat162float(d[i]) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kCached; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < dim) {
          const __nv_bfloat16 sum = __float2bfloat16(v[j] + dv[j]);
          res[i] = sum;
          v[j] = __bfloat162float(sum);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      if (threadIdx.x + j * blockDim.x < dim) sum_sq += v[j] * v[j];
    }
    const float inv_rms =
        rsqrtf(detail::block_sum(sum_sq, scratch) / static_cast<float>(dim) + eps);
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < dim) o[i] = __float2bfloat16(v[j] * inv_rms * wv[j]);
    }
    return;
  }
  detail::grid_dependency_wait();
  if (d != nullptr) {
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
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float w = __bfloat162float(weight[i]) + weight_offset;
    o[i] = __float2bfloat16(__bfloat162float(res[i]) * inv_rms * w);
  }
}

}  // namespace

cudaError_t rmsnorm_residual(const __nv_bfloat16* delta, int64_t ld_delta, __nv_bfloat16* residual,
                             int64_t ld_residual, const __nv_bfloat16* weight, float weight_offset,
                             float eps, __nv_bfloat16* out, int64_t ld_out, int rows, int dim,
                             cudaStream_t stream, bool pdl) {
  if (rows < 0 || dim <= 0 || ld_residual < dim || ld_out < dim ||
      (delta != nullptr && ld_delta < dim)) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const int threads = detail::rmsnorm_threads(dim);
  return detail::launch_kernel(rmsnorm_residual_kernel, dim3(rows), dim3(threads), 0, stream, pdl,
                               delta, ld_delta, residual, ld_residual, weight, weight_offset, eps,
                               out, ld_out, dim);
}

}  // namespace hearth::cuda
