// CPU kernels: thread-pool parallel loops over SIMD inner products (simd.h), OpenBLAS
// sgemm for prefill-sized batches.
// The AVX-512 intrinsics header first (kernels/cpu/intrinsics.h says why).
#include "kernels/cpu/intrinsics.h"

#include "kernels/cpu/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/gemm_dense.h"
#include "kernels/cpu/int8_dot.h"
#include "kernels/cpu/matvec_rows.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec_math.h"

namespace hearth::kernels::cpu {

const char* simd_name() {
#if defined(HEARTH_CPU_AVX512)
  return "avx512 mat-vec + avx2";
#elif defined(HEARTH_CPU_AVX2)
  return "avx2+fma";
#else
  return "scalar";
#endif
}

std::string prefill_gemm_name(const CpuContext& ctx) {
  const std::string blas = "OpenBLAS sgemm (" + ctx.blas_core + ")";
#ifdef HEARTH_CPU_AVX512
  // Float weights, then quantized ones off the int8 path.
  if (!ctx.hearth_prefill_gemm) {
    return blas + " (HEARTH_CPU_PREFILL_GEMM=blas); quantized off the int8 path: the same";
  }
  return "hearth avx512 blocked GEMM; quantized off the int8 path: hearth avx512 blocked GEMM, "
         "dequantized as packed";
#else
  return blas;
#endif
}

namespace {

// Rows of the weight handled per parallel_for unit in mat-vec.
constexpr int64_t kRowGrain = 8;
// Weight rows dequantized per sgemm tile.
constexpr int64_t kGemmTileRows = 128;
constexpr int64_t kMinParallelWork = 1 << 16;

float row_dot(const WeightMatrix& w, int64_t r, const float* x, const float* group_sums) {
  switch (w.dtype) {
    case DType::kF32:
      return dot_f32(static_cast<const float*>(w.data) + r * w.cols, x, w.cols);
    case DType::kBF16:
      return dot_bf16(static_cast<const uint16_t*>(w.data) + r * w.cols, x, w.cols);
    case DType::kF16:
      return dot_f16(static_cast<const uint16_t*>(w.data) + r * w.cols, x, w.cols);
    default:
      break;
  }
  // Quantized: sum_g scale_g * (q_g · x_g) + bias_g * sum(x_g).
  const int64_t groups = w.cols / w.group_size;
  const int64_t words_per_group = w.group_size * w.bits / 32;
  const auto* words = static_cast<const uint32_t*>(w.data) + r * groups * words_per_group;
  float acc = 0.0f;
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * w.group_size;
    float qd = w.bits == 8 ? qdot8(words + g * words_per_group, xg, w.group_size)
                           : qdot4(words + g * words_per_group, xg, w.group_size);
    acc += read_scalar(w.scales, w.scale_dtype, r * groups + g) * qd +
           read_scalar(w.biases, w.scale_dtype, r * groups + g) * group_sums[g];
  }
  return acc;
}

#ifdef HEARTH_CPU_AVX512
// Rows [r0, r1) of y = x · wᵀ for a float / bf16 / f16 matrix and M activation rows; y row
// i starts at y + i * y_stride and is indexed by weight row.
template <int M>
void dense_tile_avx512(const WeightMatrix& w, const float* x, int64_t r0, int64_t r1, float* y,
                       int64_t y_stride) {
  // Four weight rows per step: with four activation rows that is 16 accumulators, half
  // of the 32 vector registers.
  constexpr int kRows = 4;
  float out[M * kRows];
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) {
    dense_rows_avx512<kRows, M>(w, r, x, w.cols, out);
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < kRows; ++j) y[i * y_stride + r + j] = out[i * kRows + j];
    }
  }
  for (; r < r1; ++r) {
    dense_rows_avx512<1, M>(w, r, x, w.cols, out);
    for (int i = 0; i < M; ++i) y[i * y_stride + r] = out[i];
  }
}

void dense_tile_avx512(const WeightMatrix& w, const float* x, int64_t m, int64_t r0, int64_t r1,
                       float* y, int64_t y_stride) {
  switch (m) {
    case 1:
      return dense_tile_avx512<1>(w, x, r0, r1, y, y_stride);
    case 2:
      return dense_tile_avx512<2>(w, x, r0, r1, y, y_stride);
    case 3:
      return dense_tile_avx512<3>(w, x, r0, r1, y, y_stride);
    default:
      return dense_tile_avx512<4>(w, x, r0, r1, y, y_stride);
  }
}

template <int M>
void rows_avx512(const WeightMatrix& w, const float* x, const float* group_sums, int64_t r0,
                 int64_t r1, float* y) {
  if (!w.quantized()) {
    dense_tile_avx512<M>(w, x, r0, r1, y, w.rows);
    return;
  }
  float out[M * 4];
  // Prefill: two quantized rows per step (2 x M group and row accumulators). Decode (M = 1)
  // measured faster one row at a time.
  constexpr int kRows = M == 1 ? 1 : 2;
  const int64_t groups = w.cols / w.group_size;
  std::vector<float> scales(static_cast<std::size_t>(kRows * groups));
  std::vector<float> biases(static_cast<std::size_t>(kRows * groups));
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = w.cols * w.bits / 8;
  for (int64_t r = r0; r < r1;) {
    const int rows = r + kRows <= r1 ? kRows : 1;
    for (int64_t g = 0; g < rows * groups; ++g) {
      scales[g] = read_scalar(w.scales, w.scale_dtype, r * groups + g);
      biases[g] = read_scalar(w.biases, w.scale_dtype, r * groups + g);
    }
    const uint8_t* q = bytes + r * row_bytes;
    if (rows == kRows && w.bits == 8) {
      quant_rows_avx512<kRows, M, 8>(q, row_bytes, w.cols, w.group_size, scales.data(),
                                     biases.data(), x, w.cols, group_sums, out);
    } else if (rows == kRows) {
      quant_rows_avx512<kRows, M, 4>(q, row_bytes, w.cols, w.group_size, scales.data(),
                                     biases.data(), x, w.cols, group_sums, out);
    } else if (w.bits == 8) {
      quant_rows_avx512<1, M, 8>(q, row_bytes, w.cols, w.group_size, scales.data(), biases.data(),
                                 x, w.cols, group_sums, out);
    } else {
      quant_rows_avx512<1, M, 4>(q, row_bytes, w.cols, w.group_size, scales.data(), biases.data(),
                                 x, w.cols, group_sums, out);
    }
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < rows; ++j) y[i * w.rows + r + j] = out[i * rows + j];
    }
    r += rows;
  }
}

// Rows [r0, r1) of y = x · wᵀ with the AVX-512 row kernels; false when the format has none
// (quantized groups not a multiple of 16, or bits other than 4 and 8).
bool matvec_rows_avx512(const WeightMatrix& w, const float* x, int64_t m, const float* group_sums,
                        int64_t r0, int64_t r1, float* y) {
  if (w.quantized() && (w.group_size % 16 != 0 || (w.bits != 4 && w.bits != 8))) return false;
  switch (m) {
    case 1:
      rows_avx512<1>(w, x, group_sums, r0, r1, y);
      return true;
    case 2:
      rows_avx512<2>(w, x, group_sums, r0, r1, y);
      return true;
    case 3:
      rows_avx512<3>(w, x, group_sums, r0, r1, y);
      return true;
    case 4:
      rows_avx512<4>(w, x, group_sums, r0, r1, y);
      return true;
    default:
      return false;
  }
}
#endif

// [m, groups] sums of each activation row over each quantization group (empty when w is
// not quantized): the bias term of a quantized dot product.
std::vector<float> group_sums_of(const WeightMatrix& w, const float* x, int64_t m) {
  std::vector<float> group_sums;
  if (w.quantized()) {
    const int64_t groups = w.cols / w.group_size;
    group_sums.resize(static_cast<std::size_t>(m * groups));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t g = 0; g < groups; ++g) {
        float s = 0.0f;
        for (int64_t c = 0; c < w.group_size; ++c) s += x[i * w.cols + g * w.group_size + c];
        group_sums[i * groups + g] = s;
      }
    }
  }
  return group_sums;
}

#ifdef HEARTH_CPU_AVX512
// Prefill-sized batches with the AVX-512 kernels: 16+ rows through the cache-blocked GEMM of
// gemm_dense.h (float weights, and quantized ones dequantized as it packs them), fewer rows
// through 4 x 4 dot-product register tiles, batch invariance in the GEMM's order (dense) or the
// tiles' (quantized) at every row count. False when the format has no kernel.
bool blocked_linear_avx512(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m,
                           float* y) {
  constexpr int64_t kBlockRows = 32;
  constexpr int64_t kGemmMinRows = 16;
  if (w.quantized() && (w.group_size % 16 != 0 || (w.bits != 4 && w.bits != 8))) return false;
  // 16+ rows: the cache-blocked GEMM of gemm_dense.h, a quantized weight's slices dequantized
  // as it packs them. It replaced, for quantized weights, dequantized f32 panels multiplied by
  // a broadcast micro-kernel (1.26-1.75x them on issue 4's host, 8-bit at 2 threads and 128
  // rows a tie, and 1.20-1.75x on the VM, at 128-1,024 rows, sessions 26-27) and OpenBLAS over
  // dequantized tiles (4.5-6.1x on issue 4's host, 1.30-2.73x on the VM). Quantized weights
  // under batch invariance stay on the tiles below at every row count.
  if (m >= kGemmMinRows && !(w.quantized() && ctx.batch_invariant)) {
    return dense_gemm(ctx, w, x, m, y);
  }
  // Dense, batch-invariant, under 16 rows: the GEMM's order unpacked (dense_gemm_rows).
  if (!w.quantized() && ctx.batch_invariant) {
    for (int64_t i0 = 0; i0 < m; i0 += kDenseRowsMax) {
      if (!dense_gemm_rows(ctx, w, x + i0 * w.cols, std::min(kDenseRowsMax, m - i0),
                           y + i0 * w.rows)) {
        return false;
      }
    }
    return true;
  }
  // Under 16 rows, or quantized and batch-invariant: 4 x 4 dot-product tiles over the weight
  // itself or, quantized, over its tile dequantized once to an f32 panel (a row's sums do not
  // depend on the rows beside it).
  ctx.pool.parallel_for(w.rows, 16, [&](int64_t a, int64_t b) {
    thread_local std::vector<float> panel;  // [kBlockRows, cols], reused across calls
    for (int64_t r0 = a; r0 < b; r0 += kBlockRows) {
      const int64_t r1 = std::min(b, r0 + kBlockRows);
      WeightMatrix tile = w;
      int64_t t0 = r0, t1 = r1;
      float* ty = y;
      if (w.quantized()) {
        panel.resize(static_cast<std::size_t>(kBlockRows * w.cols));
        if (w.bits == 8) {
          dequant_rows_avx512<8>(w, r0, r1, 0, w.cols, panel.data());
        } else {
          dequant_rows_avx512<4>(w, r0, r1, 0, w.cols, panel.data());
        }
        tile = WeightMatrix{DType::kF32, r1 - r0, w.cols, panel.data()};
        t0 = 0;
        t1 = r1 - r0;
        ty = y + r0;
      }
      for (int64_t i0 = 0; i0 < m; i0 += kMatVecMaxRows) {
        const int64_t rows = std::min<int64_t>(kMatVecMaxRows, m - i0);
        dense_tile_avx512(tile, x + i0 * w.cols, rows, t0, t1, ty + i0 * w.rows, w.rows);
      }
    }
  });
  return true;
}
#endif

void matvec(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  const std::vector<float> group_sums = group_sums_of(w, x, m);
  auto body = [&](int64_t r0, int64_t r1) {
#ifdef HEARTH_CPU_AVX512
    if (matvec_rows_avx512(w, x, m, group_sums.data(), r0, r1, y)) return;
#endif
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t i = 0; i < m; ++i) {
        const float* gs = w.quantized() ? group_sums.data() + i * (w.cols / w.group_size) : nullptr;
        y[i * w.rows + r] = row_dot(w, r, x + i * w.cols, gs);
      }
    }
  };
  // Below ~64K multiply-adds a thread hand-off costs more than the work.
  if (w.rows * w.cols * m < kMinParallelWork) {
    body(0, w.rows);
  } else {
    ctx.pool.parallel_for(w.rows, kRowGrain, body);
  }
}

}  // namespace

void weight_rows_f32(const WeightMatrix& w, int64_t r0, int64_t r1, float* out) {
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * w.cols;
    if (w.panels16 != nullptr) {
      // The panels16 copy (prepare_panels16 dropped the row-major pages): element (r, c) at
      // [r / 16][c][r % 16].
      const int64_t first = (r / 16) * w.cols * 16 + r % 16;
      for (int64_t c = 0; c < w.cols; ++c) o[c] = read_scalar(w.panels16, w.dtype, first + c * 16);
    } else if (w.dtype == DType::kF32) {
      std::copy_n(static_cast<const float*>(w.data) + r * w.cols, w.cols, o);
    } else if (w.dtype == DType::kBF16) {
      const auto* p = static_cast<const uint16_t*>(w.data) + r * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) o[c] = bf16_to_f32(p[c]);
    } else if (w.dtype == DType::kF16) {
      const auto* p = static_cast<const uint16_t*>(w.data) + r * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) o[c] = f16_to_f32(p[c]);
    } else {
      const int64_t groups = w.cols / w.group_size;
      const int per_word = 32 / w.bits;
      const int64_t row_words = w.cols / per_word;
      const uint32_t mask = (1u << w.bits) - 1u;
      // Row-major codes and side tensors, or (released after prepare_rows16) the rows16 copy:
      // word k of row r at [r / 16][k][r % 16], group g's scale at [r / 16][g][r % 16].
      const bool interleaved = w.data == nullptr && w.rows16 != nullptr;
      const int64_t block = r / 16;
      const int64_t lane = r % 16;
      const int64_t stride = interleaved ? 16 : 1;
      const auto* words =
          interleaved ? static_cast<const uint32_t*>(w.rows16) + block * row_words * 16 + lane
                      : static_cast<const uint32_t*>(w.data) + r * row_words;
      const void* scales = interleaved ? w.rows16_scales : w.scales;
      const void* biases = interleaved ? w.rows16_biases : w.biases;
      const int64_t side0 = interleaved ? block * groups * 16 + lane : r * groups;
      for (int64_t g = 0; g < groups; ++g) {
        float s = read_scalar(scales, w.scale_dtype, side0 + g * stride);
        float b = read_scalar(biases, w.scale_dtype, side0 + g * stride);
        for (int64_t c = g * w.group_size; c < (g + 1) * w.group_size; ++c) {
          uint32_t q = (words[(c / per_word) * stride] >> ((c % per_word) * w.bits)) & mask;
          o[c] = s * static_cast<float>(q) + b;
        }
      }
    }
  }
}

void linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  if (ctx.int8_dot && int8_linear(ctx, w, x, m, y)) return;
  if (ctx.batch_invariant) {
    // Every row count in one order, whose sums for a row do not depend on the rows beside it:
    // the cache-blocked GEMM's for float weights, the 4 x 4 dot-product tiles for quantized
    // ones (AVX-512), else the mat-vec 4 rows a call.
#ifdef HEARTH_CPU_AVX512
    if (blocked_linear_avx512(ctx, w, x, m, y)) return;
#endif
    for (int64_t i0 = 0; i0 < m; i0 += kMatVecMaxRows) {
      matvec(ctx, w, x + i0 * w.cols, std::min(kMatVecMaxRows, m - i0), y + i0 * w.rows);
    }
    return;
  }
  if (m <= kMatVecMaxRows) {
    matvec(ctx, w, x, m, y);
    return;
  }
  if (ctx.bf16_dot && bf16_linear(ctx, w, x, m, y)) return;
#ifdef HEARTH_CPU_AVX512
  if (ctx.hearth_prefill_gemm && blocked_linear_avx512(ctx, w, x, m, y)) return;
#endif
  const int n = static_cast<int>(w.rows);
  const int k = static_cast<int>(w.cols);
  // Each chunk of weight rows is converted to f32 a tile at a time (the tile stays in cache)
  // and multiplied by single-threaded sgemm; the pool is the only parallelism.
  ctx.pool.parallel_for(w.rows, kGemmTileRows / 4, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<float> scratch;  // [tile, k], reused across calls
    for (int64_t r0 = c0; r0 < c1; r0 += kGemmTileRows) {
      const int64_t r1 = std::min(c1, r0 + kGemmTileRows);
      const float* b = nullptr;
      if (w.dtype == DType::kF32) {
        b = static_cast<const float*>(w.data) + r0 * w.cols;
      } else {
        scratch.resize(static_cast<std::size_t>((r1 - r0) * w.cols));
        weight_rows_f32(w, r0, r1, scratch.data());
        b = scratch.data();
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                  static_cast<int>(r1 - r0), k, 1.0f, x, k, b, k, 0.0f, y + r0, n);
    }
  });
}

void embedding(CpuContext& ctx, const WeightMatrix& w, const int32_t* tokens, int64_t n,
               float* out) {
  ctx.pool.parallel_for(n, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) weight_rows_f32(w, tokens[i], tokens[i] + 1, out + i * w.cols);
  });
}

void rms_norm(CpuContext& ctx, const float* x, const float* weight, int64_t rows, int64_t dim,
              float eps, float* out) {
  auto body = [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      const float* xr = x + r * dim;
      float sum = dot_f32(xr, xr, dim);
      float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
      float* o = out + r * dim;
      for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * inv * weight[i];
    }
  };
  if (rows < 4) {
    body(0, rows);
  } else {
    ctx.pool.parallel_for(rows, 1, body);
  }
}

void rope(CpuContext& ctx, float* x, const int32_t* positions, int64_t tokens, int heads,
          int head_dim, const float* inv_freq, float attention_factor) {
  const int half = head_dim / 2;
  auto body = [&](int64_t a, int64_t b) {
    std::vector<float> cs(static_cast<std::size_t>(head_dim));
    for (int64_t t = a; t < b; ++t) {
      for (int i = 0; i < half; ++i) {
        double angle = static_cast<double>(positions[t]) * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(angle)) * attention_factor;
        cs[i + half] = static_cast<float>(std::sin(angle)) * attention_factor;
      }
      for (int h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          float p = v[i];
          float q = v[i + half];
          v[i] = p * cs[i] - q * cs[i + half];
          v[i + half] = q * cs[i] + p * cs[i + half];
        }
      }
    }
  };
  if (tokens < 4) {
    body(0, tokens);
  } else {
    ctx.pool.parallel_for(tokens, 1, body);
  }
}

void silu_mul(CpuContext& ctx, const float* gate, const float* up, int64_t rows, int64_t dim,
              float* out) {
  auto body = [&](int64_t a, int64_t b) {
    int64_t i = a;
#ifdef HEARTH_CPU_AVX512
    for (; i + 16 <= b; i += 16) {
      const __m512 g = _mm512_loadu_ps(gate + i);
      const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
      _mm512_storeu_ps(out + i,
                       _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(e, _mm512_set1_ps(1.0f))),
                                     _mm512_loadu_ps(up + i)));
    }
#endif
    for (; i < b; ++i) {
      float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  };
  if (rows * dim < 8192) {
    body(0, rows * dim);
  } else {
    ctx.pool.parallel_for(rows * dim, 1024, body);
  }
}

void add_inplace(CpuContext& ctx, float* x, const float* y, int64_t n) {
  auto body = [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) x[i] += y[i];
  };
  // Serial, a prefill's adds cost ~1 ms each on one core (~3 % of a 16-thread 512-token
  // forward); decode's few thousand elements stay inline.
  if (n < (1 << 16)) {
    body(0, n);
  } else {
    ctx.pool.parallel_for(n, 4096, body);
  }
}

void paged_attention(CpuContext& ctx, const PagedAttentionArgs& a) {
  if (paged_attention_avx512(ctx, a)) return;
  // One work item per (token, head); tokens are found through a prefix table.
  std::vector<int32_t> token_seq;
  for (int s = 0; s < a.num_sequences; ++s) {
    for (int32_t t = 0; t < a.sequences[s].num_tokens; ++t) token_seq.push_back(s);
  }
  std::vector<int32_t> token_index;
  for (int s = 0; s < a.num_sequences; ++s) {
    for (int32_t t = 0; t < a.sequences[s].num_tokens; ++t) token_index.push_back(t);
  }
  const int64_t items = static_cast<int64_t>(token_seq.size()) * a.num_heads;
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t kv_stride = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  ctx.pool.parallel_for(items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<float> acc(static_cast<std::size_t>(a.head_dim));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t ti = item / a.num_heads;
      const int h = static_cast<int>(item % a.num_heads);
      const AttentionSequence& seq = a.sequences[token_seq[ti]];
      const int32_t t = token_index[ti];
      const int64_t token = seq.first_token + t;
      const int32_t slot = seq.num_cached + t;
      const int32_t first = a.window > 0 ? std::max(0, slot - a.window + 1) : 0;
      const int kvh = h / group;
      const float* q = a.q + (token * a.num_heads + h) * a.head_dim;
      scores.resize(static_cast<std::size_t>(slot - first + 1));
      float max_score = -INFINITY;
      for (int32_t j = first; j <= slot; ++j) {
        const int64_t block = seq.block_table[j / a.block_size];
        const float* k =
            a.k_cache + (block * a.block_size + j % a.block_size) * kv_stride + kvh * a.head_dim;
        float sc = dot_f32(q, k, a.head_dim) * a.scale;
        scores[j - first] = sc;
        max_score = std::max(max_score, sc);
      }
      float total = 0.0f;
      for (float& sc : scores) {
        sc = std::exp(sc - max_score);
        total += sc;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int32_t j = first; j <= slot; ++j) {
        const int64_t block = seq.block_table[j / a.block_size];
        const float* v =
            a.v_cache + (block * a.block_size + j % a.block_size) * kv_stride + kvh * a.head_dim;
        const float p = scores[j - first];
        for (int d = 0; d < a.head_dim; ++d) acc[d] += p * v[d];
      }
      float* o = a.out + (token * a.num_heads + h) * a.head_dim;
      const float inv_total = 1.0f / total;
      for (int d = 0; d < a.head_dim; ++d) o[d] = acc[d] * inv_total;
    }
  });
}

}  // namespace hearth::kernels::cpu
