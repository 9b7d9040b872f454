// The affine decode GEMVs' output stage (affine_quant.cu's register kernel and
// affine_gemv_mma.cu's tensor-core kernel): one output value through the call's epilogue,
// rounded as the unfused kernels (GEMV, then residual add or gated activation) round it.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/decode_fusion.cuh"

namespace hearth::cuda::detail {

// Whether the call's epilogue reads y before it writes it.
__device__ __forceinline__ bool affine_epilogue_reads_y(const AffineGemvArgs& a) {
  return a.epilogue == GemvEpilogue::kAccumulate || a.epilogue == GemvEpilogue::kResidualAdd;
}

// y[r, j] as the epilogue reads it (a caller may load it early, before its sums are done).
template <typename OutT>
__device__ __forceinline__ float affine_prior_output(const AffineGemvArgs& a, int r, int j) {
  const OutT* src = static_cast<const OutT*>(a.y) + r * a.ldy + j;
  if constexpr (sizeof(OutT) == 4) {
    return *src;
  } else {
    return __bfloat162float(*src);
  }
}

// y[r, j]: the epilogue on v0 (and v1, the up row, when gated); `prior` is y[r, j] as
// affine_prior_output read it, used only where affine_epilogue_reads_y.
template <typename OutT>
__device__ __forceinline__ void affine_store_output(const AffineGemvArgs& a, int r, int j, float v0,
                                                    float v1, float prior) {
  OutT* dst = static_cast<OutT*>(a.y) + r * a.ldy + j;
  if constexpr (sizeof(OutT) == 4) {
    *dst = a.epilogue == GemvEpilogue::kAccumulate ? prior + v0 : v0;
  } else {
    const float r0 = __bfloat162float(__float2bfloat16(v0));
    const float r1 = __bfloat162float(__float2bfloat16(v1));
    switch (a.epilogue) {
      case GemvEpilogue::kStore:
        *dst = __float2bfloat16(v0);
        break;
      case GemvEpilogue::kAccumulate:
        *dst = __float2bfloat16(prior + v0);
        break;
      case GemvEpilogue::kResidualAdd:
        *dst = __float2bfloat16(prior + r0);
        break;
      case GemvEpilogue::kGatedSilu:
        *dst = __float2bfloat16(detail::silu_mul(r0, r1));
        break;
      case GemvEpilogue::kGatedGeluTanh:
        *dst = __float2bfloat16(detail::gelu_tanh_mul(r0, r1));
        break;
    }
  }
}

// The same, reading y[r, j] itself where the epilogue needs it.
template <typename OutT>
__device__ __forceinline__ void affine_store_output(const AffineGemvArgs& a, int r, int j, float v0,
                                                    float v1) {
  const float prior = affine_epilogue_reads_y(a) ? affine_prior_output<OutT>(a, r, j) : 0.0f;
  affine_store_output<OutT>(a, r, j, v0, v1, prior);
}

}  // namespace hearth::cuda::detail
