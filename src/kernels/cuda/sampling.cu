// Sampling kernels. Truncation thresholds are found by radix select over the order-
// preserving integer key of each logit (4 passes of 8 bits), so nothing sorts the vocab:
// top-k selects by count, top-p by probability mass; ties at a threshold are all kept.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/sampling.cuh"

namespace hearth::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint32_t float_key(float x) {
  uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void logit_bias_kernel(SamplingArgs a) {
  int r = blockIdx.x;
  float* row = a.logits + r * a.ld_logits;
  for (int i = a.bias_offsets[r] + threadIdx.x; i < a.bias_offsets[r + 1]; i += blockDim.x) {
    int id = a.bias_ids[i];
    if (id >= 0 && id < a.vocab) atomicAdd(row + id, a.bias_values[i]);
  }
}

// counts[0]: occurrences in repetition_tokens; counts[1]: in frequency_tokens.
__global__ void count_tokens_kernel(SamplingArgs a) {
  int r = blockIdx.x;
  int32_t* rep = a.counts + static_cast<int64_t>(r) * a.vocab;
  int32_t* freq = a.counts + (static_cast<int64_t>(a.rows) + r) * a.vocab;
  if (a.repetition_offsets != nullptr) {
    for (int i = a.repetition_offsets[r] + threadIdx.x; i < a.repetition_offsets[r + 1];
         i += blockDim.x) {
      int id = a.repetition_tokens[i];
      if (id >= 0 && id < a.vocab) atomicAdd(rep + id, 1);
    }
  }
  if (a.frequency_offsets != nullptr) {
    for (int i = a.frequency_offsets[r] + threadIdx.x; i < a.frequency_offsets[r + 1];
         i += blockDim.x) {
      int id = a.frequency_tokens[i];
      if (id >= 0 && id < a.vocab) atomicAdd(freq + id, 1);
    }
  }
}

__global__ void penalty_kernel(SamplingArgs a) {
  int r = blockIdx.y;
  const SamplingRow p = a.params[r];
  const int32_t* rep = a.counts + static_cast<int64_t>(r) * a.vocab;
  const int32_t* freq = a.counts + (static_cast<int64_t>(a.rows) + r) * a.vocab;
  float* row = a.logits + r * a.ld_logits;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < a.vocab; i += gridDim.x * blockDim.x) {
    float x = row[i];
    if (rep[i] > 0 && p.repetition_penalty != 1.0f) {
      x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    }
    int c = freq[i];
    if (c > 0) x -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
    row[i] = x;
  }
}

struct SelectShared {
  float hist[256];
  uint32_t prefix;
  float above;
};

// The largest key T with weight(key >= T) >= target over elements with key >= floor_key;
// weight is 1 (count) or the unnormalized probability (mass).
template <bool kMass>
__device__ uint32_t radix_select(const float* x, int vocab, float scale2, float max_x,
                                 uint32_t floor_key, float target, SelectShared& s) {
  uint32_t prefix = 0;
  float above = 0.0f;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) s.hist[i] = 0.0f;
    __syncthreads();
    uint32_t high_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    // Logits crowd into few bins (the top byte is nearly constant), so each thread sums a
    // run of equal bins locally and flushes on a change: far fewer same-address atomics.
    uint32_t run_bin = 0xffffffffu;
    float run = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      float v = x[i];
      uint32_t key = float_key(v);
      if (key < floor_key || (key & high_mask) != (prefix & high_mask)) continue;
      float w = kMass ? exp2f((v - max_x) * scale2) : 1.0f;
      uint32_t bin = (key >> shift) & 255u;
      if (bin != run_bin) {
        if (run_bin != 0xffffffffu) atomicAdd(&s.hist[run_bin], run);
        run_bin = bin;
        run = 0.0f;
      }
      run += w;
    }
    if (run_bin != 0xffffffffu) atomicAdd(&s.hist[run_bin], run);
    __syncthreads();
    if (threadIdx.x == 0) {
      float acc = above;
      int d = 255;
      for (; d > 0; --d) {
        if (acc + s.hist[d] >= target) break;
        acc += s.hist[d];
      }
      s.prefix = prefix | (static_cast<uint32_t>(d) << shift);
      s.above = acc;
    }
    __syncthreads();
    prefix = s.prefix;
    above = s.above;
    __syncthreads();
  }
  return prefix;
}

// Exclusive prefix sum over the block (kThreads values); returns this thread's offset and
// writes the block total.
__device__ float block_exclusive_scan(float v, float* warp_totals, float* total) {
  int lane = threadIdx.x & 31;
  int warp = threadIdx.x >> 5;
  float inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    float n = __shfl_up_sync(detail::kFullMask, inclusive, o);
    if (lane >= o) inclusive += n;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    float w = warp_totals[lane];
    float wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      float n = __shfl_up_sync(detail::kFullMask, wi, o);
      if (lane >= o) wi += n;
    }
    warp_totals[lane] = wi - w;  // exclusive offset of each warp
    if (lane == 31) *total = wi;
  }
  __syncthreads();
  return warp_totals[warp] + inclusive - v;
}

// The packed argmax key of logit v at id i: one 64-bit max picks the largest value and, on
// ties, the lowest id (so the order values are visited in cannot change the result).
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
  return (static_cast<unsigned long long>(float_key(v)) << 32) |
         (0xffffffffu - static_cast<uint32_t>(i));
}
__device__ __forceinline__ int32_t argmax_id(unsigned long long key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}

constexpr int kSplitThreads = 256;
constexpr int kSplitSpan = kSplitThreads * 16;  // ids a block: 4 float4 loads a thread

// Greedy rows split over blocks (grid: vocab / kSplitSpan x rows). Each block's best key goes
// to the row's slot in greedy_state with a 64-bit atomicMax; the block that takes the row's
// last ticket reads the winner, writes the id and zeroes the slot and ticket for next time.
// One block a row walking 128K logits took ~12.5 us under Nsight Compute (S15).
__global__ void __launch_bounds__(kSplitThreads) greedy_split_kernel(SamplingArgs a) {
  __shared__ unsigned long long block_best;
  const int r = blockIdx.y;
  const float* x = a.logits + r * a.ld_logits;
  const int lo = blockIdx.x * kSplitSpan;
  const int hi = min(a.vocab, lo + kSplitSpan);
  if (threadIdx.x == 0) block_best = 0;
  __syncthreads();
  detail::grid_dependency_wait();  // a.pdl: the logits come from the previous kernel
  unsigned long long best = 0;
  auto consider = [&](float v, int i) { best = max(best, argmax_key(v, i)); };
  int tail = lo;                                   // first id the scalar loop visits
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {  // lo is a multiple of 4: x + lo too
    const float4* x4 = reinterpret_cast<const float4*>(x + lo);
    const int n4 = (hi - lo) / 4;
    constexpr int kLoads = kSplitSpan / (4 * kSplitThreads);
    float4 v[kLoads];
#pragma unroll
    for (int b = 0; b < kLoads; ++b) {
      const int j = threadIdx.x + b * kSplitThreads;
      if (j < n4) v[b] = x4[j];
    }
#pragma unroll
    for (int b = 0; b < kLoads; ++b) {
      const int j = threadIdx.x + b * kSplitThreads;
      if (j >= n4) continue;
      const int i = lo + 4 * j;
      consider(v[b].x, i);
      consider(v[b].y, i + 1);
      consider(v[b].z, i + 2);
      consider(v[b].w, i + 3);
    }
    tail = lo + 4 * n4;
  }
  for (int i = tail + threadIdx.x; i < hi; i += kSplitThreads) consider(x[i], i);
  atomicMax(&block_best, best);
  __syncthreads();
  if (threadIdx.x != 0) return;
  auto* state = static_cast<unsigned long long*>(a.greedy_state);
  auto* tickets = reinterpret_cast<unsigned int*>(state + a.rows);
  atomicMax(&state[r], block_best);
  __threadfence();
  if (atomicAdd(&tickets[r], 1u) == gridDim.x - 1) {
    a.out_tokens[r] = argmax_id(atomicExch(&state[r], 0ull));
    tickets[r] = 0;
  }
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SamplingArgs a) {
  __shared__ float scratch[32];
  __shared__ float warp_totals[32];
  __shared__ float total_mass;
  __shared__ SelectShared select;
  __shared__ int chosen;
  __shared__ unsigned long long best_packed;

  int r = blockIdx.x;
  const SamplingRow p = a.params[r];
  const float* x = a.logits + r * a.ld_logits;
  int vocab = a.vocab;

  if (p.temperature <= 0.0f || p.top_k == 1) {
    // Argmax, lowest id on ties: pack (key, ~id) so one 64-bit max decides both (the order
    // values are visited in cannot change the result). A 16-byte aligned row is read 4 float4
    // loads a thread at a time (one scalar load in flight a thread made this kernel ~50 us at
    // a 128K vocab, S15-W7).
    if (threadIdx.x == 0) best_packed = 0;
    __syncthreads();
    unsigned long long best = 0;
    auto consider = [&](float v, int i) { best = max(best, argmax_key(v, i)); };
    auto consider4 = [&](const float4& v, int i) {  // ids i .. i + 3
      consider(v.x, i);
      consider(v.y, i + 1);
      consider(v.z, i + 2);
      consider(v.w, i + 3);
    };
    int tail = 0;  // first id the scalar loop visits
    if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
      const float4* x4 = reinterpret_cast<const float4*>(x);
      const int n4 = vocab / 4;
      constexpr int kBatch = 4;
      int j = threadIdx.x;
      for (; j + (kBatch - 1) * kThreads < n4; j += kBatch * kThreads) {
        float4 v[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) v[b] = x4[j + b * kThreads];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) consider4(v[b], 4 * (j + b * kThreads));
      }
      for (; j < n4; j += kThreads) consider4(x4[j], 4 * j);
      tail = 4 * n4;
    }
    for (int i = tail + threadIdx.x; i < vocab; i += blockDim.x) consider(x[i], i);
    atomicMax(&best_packed, best);
    __syncthreads();
    if (threadIdx.x == 0) a.out_tokens[r] = argmax_id(best_packed);
    return;
  }

  float max_x = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) max_x = fmaxf(max_x, x[i]);
  max_x = detail::block_max(max_x, scratch);
  float scale2 = detail::kLog2e / p.temperature;  // p_i = 2^((x_i - max) * scale2)

  uint32_t threshold = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    threshold =
        radix_select<false>(x, vocab, scale2, max_x, 0u, static_cast<float>(p.top_k), select);
  }
  if (p.top_p < 1.0f) {
    float mass = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      if (float_key(x[i]) >= threshold) mass += exp2f((x[i] - max_x) * scale2);
    }
    mass = detail::block_sum(mass, scratch);
    threshold = radix_select<true>(x, vocab, scale2, max_x, threshold, p.top_p * mass, select);
  }

  // Each thread owns a contiguous chunk, so the draw walks ids in order.
  int per = detail::ceil_div(vocab, kThreads);
  int begin = min(vocab, static_cast<int>(threadIdx.x) * per);
  int end = min(vocab, begin + per);
  auto kept_weight = [&](int i) {
    float v = x[i];
    if (float_key(v) < threshold) return 0.0f;
    float w = exp2f((v - max_x) * scale2);
    return (p.min_p > 0.0f && w < p.min_p) ? 0.0f : w;
  };
  float local = 0.0f;
  int last_kept = -1;
  for (int i = begin; i < end; ++i) {
    float w = kept_weight(i);
    local += w;
    if (w > 0.0f) last_kept = i;
  }
  if (threadIdx.x == 0) chosen = -1;
  float offset = block_exclusive_scan(local, warp_totals, &total_mass);
  atomicMax(&chosen, last_kept);  // fallback when rounding puts the draw past the end
  __syncthreads();
  uint64_t bits = splitmix64(p.seed ^ splitmix64(p.step));
  float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f) * total_mass;
  if (local > 0.0f && u >= offset && u < offset + local) {
    float cumulative = offset;
    int pick = last_kept;
    for (int i = begin; i < end; ++i) {
      float w = kept_weight(i);
      cumulative += w;
      if (w > 0.0f && u < cumulative) {
        pick = i;
        break;
      }
    }
    chosen = pick;
  }
  __syncthreads();
  if (threadIdx.x == 0) a.out_tokens[r] = chosen < 0 ? 0 : chosen;
}

}  // namespace

size_t sampling_workspace_bytes(int rows, int vocab) {
  return 2 * static_cast<size_t>(rows) * vocab * sizeof(int32_t);
}

size_t greedy_workspace_bytes(int rows) {
  return static_cast<size_t>(rows) * (sizeof(unsigned long long) + sizeof(unsigned int));
}

cudaError_t sample_tokens(const SamplingArgs& a, cudaStream_t stream) {
  bool penalties = a.repetition_offsets != nullptr || a.frequency_offsets != nullptr;
  const bool split = a.all_greedy && a.greedy_state != nullptr;
  const bool plain_split = split && !penalties && a.bias_offsets == nullptr;  // reads no params
  if (a.rows < 0 || a.vocab <= 0 || a.ld_logits < a.vocab ||
      (a.params == nullptr && !plain_split) || a.out_tokens == nullptr ||
      (penalties && a.counts == nullptr) || a.rows > 65535 || (a.pdl && !plain_split)) {
    return cudaErrorInvalidValue;
  }
  if (a.rows == 0) return cudaSuccess;
  if (a.bias_offsets != nullptr) logit_bias_kernel<<<a.rows, 128, 0, stream>>>(a);
  if (penalties) {
    cudaError_t err =
        cudaMemsetAsync(a.counts, 0, sampling_workspace_bytes(a.rows, a.vocab), stream);
    if (err != cudaSuccess) return err;
    count_tokens_kernel<<<a.rows, 256, 0, stream>>>(a);
    dim3 grid(detail::ceil_div(a.vocab, 2048), a.rows);
    penalty_kernel<<<grid, 256, 0, stream>>>(a);
  }
  if (split) {
    const dim3 grid(detail::ceil_div(a.vocab, kSplitSpan), a.rows);
    cudaError_t err =
        detail::launch_kernel(greedy_split_kernel, grid, dim3(kSplitThreads), 0, stream, a.pdl, a);
    if (err != cudaSuccess) return err;
  } else {
    sample_kernel<<<a.rows, kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace hearth::cuda
