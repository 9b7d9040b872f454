// bf16 GEMV for decode (m <= 4 rows): y[m, n] = x[m, k] · w[n, k]^T (+ y), f32 accumulate.
// cuBLASLt reaches only 40-50% of the copy bandwidth on 4096x4096 at m = 1 (dev/cuda/
// NOTES.md); this kernel keeps x in shared memory and streams w with 16-byte loads, four in
// flight per lane. GemmBf16::run routes small-m shapes here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hearth::cuda {

constexpr int kGemvMaxRows = 4;

// True when gemv_bf16 handles the shape: m <= kGemvMaxRows, x fits in shared memory,
// k, ldx, ldw multiples of 8 and x, w 16-byte aligned.
bool gemv_bf16_supported(int m, int n, int k, const void* x, int64_t ldx, const void* w,
                         int64_t ldw);

// y is bf16, or f32 when y_f32; accumulate adds to y instead of overwriting it.
cudaError_t gemv_bf16(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                      void* y, int64_t ldy, bool y_f32, bool accumulate, int m, int n, int k,
                      int sm_count, cudaStream_t stream);

}  // namespace hearth::cuda
