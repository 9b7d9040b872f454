// bf16 GEMV: x staged in shared memory once per block, a grid-stride loop of warps over
// output rows, each lane keeping four 16-byte weight loads in flight. The GemvArgs form adds
// the decode step's fusions (RMSNorm prologue; residual-add, gated-activation, bias
// epilogues), split rows and programmatic dependent launch.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/pdl.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarps = 16;
constexpr int kUnroll = 4;
constexpr size_t kMaxSharedBytes = 48 * 1024;

__device__ __forceinline__ void unpack8(const uint4& raw, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 v = __bfloat1622float2(h[j]);
    f[2 * j] = v.x;
    f[2 * j + 1] = v.y;
  }
}

template <int kRows, typename OutT>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_bf16_kernel(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                     OutT* y, int64_t ldy, bool accumulate, int n, int k) {
  extern __shared__ uint4 xs[];  // [kRows, k / 8]
  const int chunks = k / 8;
  const int lane = threadIdx.x & 31;
  // The first weight loads of this warp's first row go out before x is staged, so the
  // x prologue overlaps the weight stream instead of delaying it.
  const int first_row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  bool prefetched = first_row < n && lane + 32 * (kUnroll - 1) < chunks;
  uint4 pre[kUnroll];
  if (prefetched) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + first_row * ldw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) pre[u] = detail::load_stream16(wr + lane + 32 * u);
  }
  for (int i = threadIdx.x; i < kRows * chunks; i += blockDim.x) {
    int r = i / chunks;
    int c = i % chunks;
    xs[i] = *reinterpret_cast<const uint4*>(x + r * ldx + c * 8);
  }
  __syncthreads();
  for (int row = blockIdx.x * kWarps + (threadIdx.x >> 5); row < n; row += gridDim.x * kWarps) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + row * ldw);
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    int c = lane;
    for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
      uint4 wv[kUnroll];
      if (prefetched) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = pre[u];
        prefetched = false;
      } else {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = detail::load_stream16(wr + c + 32 * u);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float wf[8];
        unpack8(wv[u], wf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float xf[8];
          unpack8(xs[r * chunks + c + 32 * u], xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r] += wf[j] * xf[j];
        }
      }
    }
    for (; c < chunks; c += 32) {
      float wf[8];
      unpack8(detail::load_stream16(wr + c), wf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float xf[8];
        unpack8(xs[r * chunks + c], xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] += wf[j] * xf[j];
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = detail::warp_sum(acc[r]);
      if (lane == 0) {
        OutT* dst = y + r * ldy + row;
        if constexpr (sizeof(OutT) == 4) {
          *dst = accumulate ? *dst + v : v;
        } else {
          *dst = __float2bfloat16(accumulate ? __bfloat162float(*dst) + v : v);
        }
      }
    }
  }
}

template <typename OutT>
cudaError_t launch(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                   OutT* y, int64_t ldy, bool accumulate, int m, int n, int k, int sm_count,
                   cudaStream_t stream) {
  size_t smem = static_cast<size_t>(m) * k * sizeof(__nv_bfloat16);
  int blocks = std::min(detail::ceil_div(n, kWarps), std::max(1, sm_count) * 2);
  dim3 block(kWarps * 32);
  switch (m) {
    case 1:
      gemv_bf16_kernel<1, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    case 2:
      gemv_bf16_kernel<2, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    case 3:
      gemv_bf16_kernel<3, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    case 4:
      gemv_bf16_kernel<4, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// Rewrites the kRows staged rows of x (bf16 [kRows, k] in shared memory) as
// bf16(x * rsqrt(mean(x^2) + eps) * (weight + offset)), with rmsnorm_residual's summation
// order (decode_fusion.cuh): this block's 512 threads play its rmsnorm_threads(k) threads.
constexpr int kNormRegs = 2;  // weight chunks per thread held in registers (k <= 8192)

template <int kRows>
__device__ void normalize_rows(uint4* xs, int k, const __nv_bfloat16* weight,
                               const uint4 (&wreg)[kNormRegs], float offset, float eps,
                               float* scratch) {
  __nv_bfloat16* xh = reinterpret_cast<__nv_bfloat16*>(xs);
  const int vthreads = detail::rmsnorm_threads(k);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll 1
  for (int r = 0; r < kRows; ++r) {
    __nv_bfloat16* row = xh + r * k;
    float part[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int vt = threadIdx.x + j * kWarps * 32;
      float s = 0.0f;
      if (vt < vthreads) {
        for (int i = vt; i < k; i += vthreads) {
          float v = __bfloat162float(row[i]);
          s += v * v;
        }
      }
      part[j] = detail::warp_sum(s);
    }
    if (lane == 0) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int vw = warp + j * kWarps;
        if (vw < vthreads / 32) scratch[vw] = part[j];
      }
    }
    __syncthreads();
    const float total = detail::warp_sum(lane < vthreads / 32 ? scratch[lane] : 0.0f);
    const float inv_rms = rsqrtf(total / static_cast<float>(k) + eps);
    __syncthreads();  // scratch and the row are read before they are rewritten
    // Elementwise, so any chunking gives the same bits; the weight chunks of the first
    // kNormRegs passes were loaded before the wait on the previous kernel.
    auto scale = [&](const uint4& wraw, int c) {
      float wf[8];
      unpack8(wraw, wf);
      __nv_bfloat16* e = row + c * 8;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float w = wf[i] + offset;
        e[i] = __float2bfloat16(__bfloat162float(e[i]) * inv_rms * w);
      }
    };
#pragma unroll
    for (int j = 0; j < kNormRegs; ++j) {
      const int c = threadIdx.x + j * kWarps * 32;
      if (c < k / 8) scale(wreg[j], c);
    }
    for (int c = threadIdx.x + kNormRegs * kWarps * 32; c < k / 8; c += kWarps * 32) {
      scale(*reinterpret_cast<const uint4*>(weight + c * 8), c);
    }
  }
  __syncthreads();
}

// Brings the 128-byte line holding p into L2 (no registers, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Lane `lane` of `lanes` prefetches its share of the lines of [p, p + bytes) into L2.
__device__ __forceinline__ void prefetch_range_l2(const char* p, size_t bytes, size_t lane,
                                                  size_t lanes) {
  for (size_t off = lane * 128; off < bytes; off += lanes * 128) prefetch_l2(p + off);
}

// bf16(v), then + bias and rounded again (as the GEMV followed by bias_add rounds).
__device__ __forceinline__ float round_bias(float v, const __nv_bfloat16* bias, int index) {
  __nv_bfloat16 t = __float2bfloat16(v);
  if (bias != nullptr) t = __float2bfloat16(__bfloat162float(t) + __bfloat162float(bias[index]));
  return __bfloat162float(t);
}

__device__ __forceinline__ bool reads_y(GemvEpilogue e) {
  return e == GemvEpilogue::kAccumulate || e == GemvEpilogue::kResidualAdd;
}

// old: y's value before this GEMV (loaded early by the caller when reads_y).
template <typename OutT>
__device__ __forceinline__ void store_output(const GemvArgs& a, int r, int row, float v0, float v1,
                                             float old) {
  OutT* dst = static_cast<OutT*>(a.y) + r * a.ldy + row;
  if constexpr (sizeof(OutT) == 4) {
    if (a.bias != nullptr) v0 += __bfloat162float(a.bias[row]);
    *dst = a.epilogue == GemvEpilogue::kAccumulate ? old + v0 : v0;
  } else {
    switch (a.epilogue) {
      case GemvEpilogue::kStore:
        *dst = __float2bfloat16(round_bias(v0, a.bias, row));
        break;
      case GemvEpilogue::kAccumulate:
        *dst = __float2bfloat16(old + v0);
        break;
      case GemvEpilogue::kResidualAdd:
        *dst = __float2bfloat16(old + round_bias(v0, a.bias, row));
        break;
      case GemvEpilogue::kGatedSilu:
        *dst = __float2bfloat16(
            detail::silu_mul(round_bias(v0, a.bias, row), round_bias(v1, a.bias, row + a.n)));
        break;
      case GemvEpilogue::kGatedGeluTanh:
        *dst = __float2bfloat16(
            detail::gelu_tanh_mul(round_bias(v0, a.bias, row), round_bias(v1, a.bias, row + a.n)));
        break;
    }
  }
}

// How a warp task maps to weight rows: one row, a gated pair (j and j + n) or a RoPE pair
// (rows i and i + head_dim / 2 of one head; n counts rows, so there are n / 2 tasks).
enum TaskMode { kSingle = 0, kGatedPair = 1, kRopePair = 2 };

template <int kMode>
__device__ __forceinline__ int task_count(const GemvArgs& a) {
  return kMode == kRopePair ? a.n / 2 : a.n;
}

template <int kMode>
__device__ __forceinline__ int64_t weight_row(const GemvArgs& a, int task, int p) {
  if constexpr (kMode == kRopePair) {
    const int half = a.rope.head_dim / 2;
    const int head = task / half;
    return static_cast<int64_t>(head) * a.rope.head_dim + (task - head * half) + p * half;
  } else if constexpr (kMode == kGatedPair) {
    const int b = a.gate_up_block;
    return b > 0 ? static_cast<int64_t>(task / b) * 2 * b + task % b + p * b
                 : task + static_cast<int64_t>(p) * a.n;
  } else {
    return task;
  }
}

// rope_kv_write's stores for token r's rows i, i + head_dim / 2 of one head: v0, v1 as the
// unfused GEMV stores them (bf16, + bias), then rotated (q, k) or copied (v). pos, slot and
// inv_freq[i] were loaded while the weights streamed.
__device__ __forceinline__ void store_rope(const GemvArgs& a, int r, int task, float v0, float v1,
                                           float pos, int64_t slot, float freq) {
  const int half = a.rope.head_dim / 2;
  const int row0 = (task / half) * a.rope.head_dim + task % half;
  detail::rope_kv_store(a.rope, r, task, round_bias(v0, a.bias, row0),
                        round_bias(v1, a.bias, row0 + half), pos, slot, freq);
}

// One output column per warp task (split warps per task, each taking every split-th
// 32-chunk stripe); paired tasks stream two weight rows (weight_row). The first task's
// weight loads go out before the wait on the previous kernel: weights never depend on it.
template <int kRows, int kMode, typename OutT>
__global__ void __launch_bounds__(kWarps * 32, 2) gemv_fused_kernel(const GemvArgs a) {
  extern __shared__ uint4 xs[];  // [kRows, k / 8]
  constexpr int kPair = kMode == kSingle ? 1 : 2;
  constexpr int kU = kUnroll / kPair;  // loads in flight per lane per weight row
  __shared__ float red[2][kWarps][kPair * kRows];
  __shared__ float scratch[32];
  const int chunks = a.k / 8;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int split = a.split;
  const int tasks_per_block = kWarps / split;
  const int sub = warp % split;
  const int stride = 32 * split;
  const int c0 = sub * 32 + lane;
  const int n = task_count<kMode>(a);
  const auto* w = reinterpret_cast<const uint4*>(a.w);
  const int64_t ldw8 = a.ldw / 8;

  const int first = blockIdx.x * tasks_per_block + warp / split;
  bool prefetched = first < n && c0 + stride * (kU - 1) < chunks;
  uint4 pre[kPair][kU];
  if (prefetched) {
#pragma unroll
    for (int p = 0; p < kPair; ++p) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        pre[p][u] =
            detail::load_stream16(w + weight_row<kMode>(a, first, p) * ldw8 + c0 + stride * u);
      }
    }
  }
  // Optionally the rest of the first task's rows into L2 (lanes' prefetches: bytes in
  // flight without registers).
  if (a.l2_prefetch > 0 && sub == 0 && first < n) {
#pragma unroll
    for (int p = 0; p < kPair; ++p) {
      prefetch_range_l2(reinterpret_cast<const char*>(w + weight_row<kMode>(a, first, p) * ldw8),
                        size_t(a.k) * 2, lane, 32);
    }
  }
  // The norm weights do not depend on the previous kernel either.
  uint4 norm_w[kNormRegs] = {};
  if (a.norm_weight != nullptr) {
#pragma unroll
    for (int j = 0; j < kNormRegs; ++j) {
      const int c = threadIdx.x + j * kWarps * 32;
      if (c < chunks) norm_w[j] = *reinterpret_cast<const uint4*>(a.norm_weight + c * 8);
    }
  }
  // RoPE pairs: the rows' positions and cache slots (step metadata, which no kernel writes)
  // load before the wait; each task's frequency at its start. The epilogue then waits on no
  // memory (W1: loading them there cost ~4 us a layer at 3 tasks a warp).
  float rope_pos[kRows];
  int64_t rope_slot[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    rope_pos[r] = 0.0f;
    rope_slot[r] = -1;
    if constexpr (kMode == kRopePair) {
      if (sub == 0 && lane == 0) {
        rope_pos[r] = static_cast<float>(a.rope.positions[r]);
        rope_slot[r] = a.rope.slots[r];
      }
    }
  }
  detail::grid_dependency_wait();
  for (int i = threadIdx.x; i < kRows * chunks; i += blockDim.x) {
    int r = i / chunks;
    int c = i % chunks;
    xs[i] = *reinterpret_cast<const uint4*>(a.x + r * a.ldx + c * 8);
  }
  __syncthreads();
  if (a.norm_weight != nullptr) {
    normalize_rows<kRows>(xs, a.k, a.norm_weight, norm_w, a.norm_offset, a.norm_eps, scratch);
  }
  detail::launch_dependents();

  int parity = 0;
  for (int base = blockIdx.x * tasks_per_block; base < n; base += gridDim.x * tasks_per_block) {
    const int task = base + warp / split;
    const bool active = task < n;
    // y's old values (residual add, accumulate) load while the weights stream.
    float old[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) old[r] = 0.0f;
    float rope_freq = 0.0f;
    if constexpr (kMode == kRopePair) {
      if (active && sub == 0 && lane == 0) {
        rope_freq = a.rope.inv_freq[task % (a.rope.head_dim / 2)];
      }
    }
    if (active && sub == 0 && lane == 0 && reads_y(a.epilogue)) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if constexpr (sizeof(OutT) == 4) {
          old[r] = static_cast<const float*>(a.y)[r * a.ldy + task];
        } else {
          old[r] = __bfloat162float(static_cast<const __nv_bfloat16*>(a.y)[r * a.ldy + task]);
        }
      }
    }
    float acc[kPair][kRows];
#pragma unroll
    for (int p = 0; p < kPair; ++p) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[p][r] = 0.0f;
    }
    if (active) {
      const uint4* wr[kPair];
#pragma unroll
      for (int p = 0; p < kPair; ++p) wr[p] = w + weight_row<kMode>(a, task, p) * ldw8;
      int c = c0;
      for (; c + stride * (kU - 1) < chunks; c += stride * kU) {
        uint4 wv[kPair][kU];
        if (prefetched) {
#pragma unroll
          for (int p = 0; p < kPair; ++p) {
#pragma unroll
            for (int u = 0; u < kU; ++u) wv[p][u] = pre[p][u];
          }
          prefetched = false;
        } else {
#pragma unroll
          for (int p = 0; p < kPair; ++p) {
#pragma unroll
            for (int u = 0; u < kU; ++u) wv[p][u] = detail::load_stream16(wr[p] + c + stride * u);
          }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
#pragma unroll
          for (int p = 0; p < kPair; ++p) {
            float wf[8];
            unpack8(wv[p][u], wf);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              float xf[8];
              unpack8(xs[r * chunks + c + stride * u], xf);
#pragma unroll
              for (int j = 0; j < 8; ++j) acc[p][r] += wf[j] * xf[j];
            }
          }
        }
      }
      for (; c < chunks; c += stride) {
#pragma unroll
        for (int p = 0; p < kPair; ++p) {
          float wf[8];
          unpack8(detail::load_stream16(wr[p] + c), wf);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float xf[8];
            unpack8(xs[r * chunks + c], xf);
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[p][r] += wf[j] * xf[j];
          }
        }
      }
    }
    detail::reduce_task_sums<kPair, kRows, kWarps>(acc, red, parity, warp, sub, lane, split);
    if (active && sub == 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if constexpr (kMode == kRopePair) {
          store_rope(a, r, task, acc[0][r], acc[1][r], rope_pos[r], rope_slot[r], rope_freq);
        } else {
          store_output<OutT>(a, r, task, acc[0][r], acc[kPair - 1][r], old[r]);
        }
      }
    }
  }
  // Done with this GEMV's weights: pull the next kernel's into L2 while the small kernels
  // between them (rope, attention) leave the memory idle.
  if (a.prefetch_bytes > 0) {
    const size_t gw = static_cast<size_t>(blockIdx.x) * kWarps + warp;
    prefetch_range_l2(static_cast<const char*>(a.prefetch), a.prefetch_bytes, gw * 32 + lane,
                      static_cast<size_t>(gridDim.x) * kWarps * 32);
  }
}

// Blocks for `tasks` at `split` warps a task when every warp gets the same number of tasks
// (at most `cap` blocks).
int balanced_blocks(int tasks, int split, int cap) {
  const int tasks_per_block = kWarps / split;
  const int rounds = detail::ceil_div(tasks, tasks_per_block * cap);
  return detail::ceil_div(tasks, tasks_per_block * rounds);
}

template <int kRows, int kMode, typename OutT>
cudaError_t launch_fused(const GemvArgs& a, cudaStream_t stream) {
  // Split 0: one warp per row while the rows fit one wave of warps (2 blocks of 16 per SM),
  // else two warps per row over a grid where every warp gets the same number of tasks
  // (lab_decode_step, W1: qkv, gate_up, lm_head 2-7 % faster; o, down 1-3 % slower). RoPE
  // pairs follow the same rule: the 8B's 3072 pairs take split 1 (192 blocks; the step with
  // the attention after it measured 4.023 ms at split 1, 4.107 at 2, 4.071 at 4: the SMs
  // with one block host the attention's blocks and the o GEMV's first ones).
  GemvArgs b = a;
  const int tasks = kMode == kRopePair ? a.n / 2 : a.n;
  const int cap = std::max(1, a.sm_count) * 2;
  if (b.split == 0) b.split = tasks > cap * kWarps ? 2 : 1;
  const int tasks_per_block = kWarps / b.split;
  int blocks = std::min(detail::ceil_div(tasks, tasks_per_block), cap);
  if (a.split == 0 && b.split > 1) blocks = balanced_blocks(tasks, b.split, cap);
  if (a.grid > 0) blocks = a.grid;
  const size_t smem = static_cast<size_t>(a.m) * a.k * sizeof(__nv_bfloat16);
  return detail::launch_kernel(gemv_fused_kernel<kRows, kMode, OutT>, dim3(blocks),
                               dim3(kWarps * 32), smem, stream, a.pdl, b);
}

template <int kMode, typename OutT>
cudaError_t dispatch_rows(const GemvArgs& a, cudaStream_t stream) {
  switch (a.m) {
    case 1:
      return launch_fused<1, kMode, OutT>(a, stream);
    case 2:
      return launch_fused<2, kMode, OutT>(a, stream);
    case 3:
      return launch_fused<3, kMode, OutT>(a, stream);
    case 4:
      return launch_fused<4, kMode, OutT>(a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

bool gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

}  // namespace

namespace {

bool shape_supported(int m, int n, int k, const void* x, int64_t ldx, const void* w, int64_t ldw) {
  return m >= 1 && m <= kGemvMaxRows && n > 0 && k > 0 && k % 8 == 0 && ldx % 8 == 0 &&
         ldw % 8 == 0 && static_cast<size_t>(m) * k * 2 <= kMaxSharedBytes &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

}  // namespace

bool gemv_bf16_supported(int m, int n, int k, const void* x, int64_t ldx, const void* w,
                         int64_t ldw) {
  return m <= kGemvRoutedMaxRows && shape_supported(m, n, k, x, ldx, w, ldw);
}

cudaError_t gemv_bf16(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                      void* y, int64_t ldy, bool y_f32, bool accumulate, int m, int n, int k,
                      int sm_count, cudaStream_t stream) {
  if (!shape_supported(m, n, k, x, ldx, w, ldw) || ldx < k || ldw < k || ldy < n) {
    return cudaErrorInvalidValue;
  }
  if (y_f32) {
    return launch(x, ldx, w, ldw, static_cast<float*>(y), ldy, accumulate, m, n, k, sm_count,
                  stream);
  }
  return launch(x, ldx, w, ldw, static_cast<__nv_bfloat16*>(y), ldy, accumulate, m, n, k, sm_count,
                stream);
}

}  // namespace hearth::cuda

namespace hearth::cuda {

bool gemv_bf16_supported(const GemvArgs& a) {
  if (!shape_supported(a.m, a.n, a.k, a.x, a.ldx, a.w, a.ldw)) return false;
  if (a.split != 0 && a.split != 1 && a.split != 2 && a.split != 4) return false;
  if (a.l2_prefetch < 0 || a.l2_prefetch > 1) return false;
  if (a.prefetch_bytes > 0 && a.prefetch == nullptr) return false;
  if (a.ldx < a.k || a.ldw < a.k || a.grid < 0) return false;
  if (a.gate_up_block < 0 || (a.gate_up_block > 0 && a.n % a.gate_up_block != 0)) return false;
  if (a.epilogue == GemvEpilogue::kRopeKvWrite) {
    const RopeKvWriteArgs& r = a.rope;
    return !a.y_f32 && r.q_heads > 0 && r.kv_heads > 0 && r.head_dim > 0 && r.head_dim % 2 == 0 &&
           r.rotary_dim == r.head_dim && r.q_norm == nullptr && r.k_norm == nullptr &&
           static_cast<int64_t>(r.q_heads + 2 * r.kv_heads) * r.head_dim == a.n &&
           r.ld_q_out >= static_cast<int64_t>(r.q_heads) * r.head_dim && r.positions != nullptr &&
           r.slots != nullptr && r.inv_freq != nullptr && r.q_out != nullptr &&
           r.k_cache != nullptr && r.v_cache != nullptr;
  }
  if (a.y == nullptr || a.ldy < a.n) return false;
  const bool pair = gated(a.epilogue);
  if (a.y_f32 && (pair || a.epilogue == GemvEpilogue::kResidualAdd)) return false;
  if (a.bias != nullptr && a.epilogue == GemvEpilogue::kAccumulate) return false;
  // Gate and up rows: 2n rows of w, row indices must fit an int.
  return !pair || a.n <= (1 << 30);
}

cudaError_t gemv_bf16(const GemvArgs& a, cudaStream_t stream) {
  if (!gemv_bf16_supported(a)) return cudaErrorInvalidValue;
  cudaError_t err;
  if (a.epilogue == GemvEpilogue::kRopeKvWrite) {
    err = dispatch_rows<kRopePair, __nv_bfloat16>(a, stream);
  } else if (gated(a.epilogue)) {
    err = dispatch_rows<kGatedPair, __nv_bfloat16>(a, stream);
  } else if (a.y_f32) {
    err = dispatch_rows<kSingle, float>(a, stream);
  } else {
    err = dispatch_rows<kSingle, __nv_bfloat16>(a, stream);
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace hearth::cuda
