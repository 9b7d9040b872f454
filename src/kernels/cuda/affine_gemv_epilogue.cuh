// The affine decode GEMVs' output stage (affine_quant.cu's register kernel and
// affine_gemv_mma.cu's tensor-core kernel): one output value through the call's epilogue,
// rounded as the unfused kernels (GEMV, then residual add or gated activation) round it.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/decode_fusion.cuh"

namespace hearth::cuda::detail {

// y[r, j]: the epilogue on v0 (and v1, the up row, when gated).
template <typename OutT>
__device__ __forceinline__ void affine_store_output(const AffineGemvArgs& a, int r, int j, float v0,
                                                    float v1) {
  OutT* dst = static_cast<OutT*>(a.y) + r * a.ldy + j;
  if constexpr (sizeof(OutT) == 4) {
    *dst = a.epilogue == GemvEpilogue::kAccumulate ? *dst + v0 : v0;
  } else {
    const float r0 = __bfloat162float(__float2bfloat16(v0));
    const float r1 = __bfloat162float(__float2bfloat16(v1));
    switch (a.epilogue) {
      case GemvEpilogue::kStore:
        *dst = __float2bfloat16(v0);
        break;
      case GemvEpilogue::kAccumulate:
        *dst = __float2bfloat16(__bfloat162float(*dst) + v0);
        break;
      case GemvEpilogue::kResidualAdd:
        *dst = __float2bfloat16(__bfloat162float(*dst) + r0);
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

}  // namespace hearth::cuda::detail
