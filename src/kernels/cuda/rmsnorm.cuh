// RMSNorm fused with the residual add, the step between every two sublayers:
//   residual[t] = bf16(residual[t] + delta[t])            (skipped when delta is null)
//   out[t]      = bf16(residual[t] * rsqrt(mean(residual[t]^2) + eps) * (weight + offset))
// in f32. Gemma passes weight_offset 1 (its weights are stored as w - 1), others 0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

// delta: [rows, dim] (ld_delta) or null; residual: [rows, dim] (ld_residual), updated in
// place; weight: [dim]; out: [rows, dim] (ld_out), may alias delta but not residual.
// pdl (sm_90+ only): launched as a programmatic dependent of the previous kernel, so its blocks
// are scheduled as that kernel's blocks exit; it waits for that kernel's writes before reading.
cudaError_t rmsnorm_residual(const __nv_bfloat16* delta, int64_t ld_delta, __nv_bfloat16* residual,
                             int64_t ld_residual, const __nv_bfloat16* weight, float weight_offset,
                             float eps, __nv_bfloat16* out, int64_t ld_out, int rows, int dim,
                             cudaStream_t stream, bool pdl = false);

}  // namespace hearth::cuda
