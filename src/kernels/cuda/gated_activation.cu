// Gated activation: a 2-D grid stride loop; memory bound (two reads, one write). Rows whose
// columns and strides are multiples of 8 (16-byte aligned) move 8 elements a thread at a time.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/pdl.cuh"

namespace hearth::cuda {
namespace {

template <GatedActivation kAct>
__device__ __forceinline__ float gate_mul(float g, float u) {
  return kAct == GatedActivation::kSilu ? detail::silu_mul(g, u) : detail::gelu_tanh_mul(g, u);
}

template <GatedActivation kAct>
__global__ void gated_activation_kernel(const __nv_bfloat16* gate, int64_t ld_gate,
                                        const __nv_bfloat16* up, int64_t ld_up, __nv_bfloat16* out,
                                        int64_t ld_out, int cols) {
  detail::grid_dependency_wait();  // a PDL launch: the gate_up GEMM's output first
  int row = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
    float g = __bfloat162float(gate[row * ld_gate + i]);
    float u = __bfloat162float(up[row * ld_up + i]);
    out[row * ld_out + i] = __float2bfloat16(gate_mul<kAct>(g, u));
  }
}

// The same per-element math, 8 columns a thread through 16-byte loads and stores.
template <GatedActivation kAct>
__global__ void gated_activation_vec8_kernel(const __nv_bfloat16* gate, int64_t ld_gate,
                                             const __nv_bfloat16* up, int64_t ld_up,
                                             __nv_bfloat16* out, int64_t ld_out, int cols) {
  detail::grid_dependency_wait();
  int row = blockIdx.y;
  for (int i = 8 * (blockIdx.x * blockDim.x + threadIdx.x); i < cols;
       i += 8 * gridDim.x * blockDim.x) {
    const uint4 graw = *reinterpret_cast<const uint4*>(gate + row * ld_gate + i);
    const uint4 uraw = *reinterpret_cast<const uint4*>(up + row * ld_up + i);
    const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&graw);
    const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&uraw);
    uint4 oraw;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&oraw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 g = __bfloat1622float2(g2[j]);
      const float2 u = __bfloat1622float2(u2[j]);
      o2[j] = __halves2bfloat162(__float2bfloat16(gate_mul<kAct>(g.x, u.x)),
                                 __float2bfloat16(gate_mul<kAct>(g.y, u.y)));
    }
    *reinterpret_cast<uint4*>(out + row * ld_out + i) = oraw;
  }
}

}  // namespace

cudaError_t gated_activation(GatedActivation act, const __nv_bfloat16* gate, int64_t ld_gate,
                             const __nv_bfloat16* up, int64_t ld_up, __nv_bfloat16* out,
                             int64_t ld_out, int rows, int cols, cudaStream_t stream, bool pdl) {
  if (rows < 0 || cols <= 0 || ld_gate < cols || ld_up < cols || ld_out < cols || rows > 65535) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool silu = act == GatedActivation::kSilu;
  if (cols % 8 == 0 && ld_gate % 8 == 0 && ld_up % 8 == 0 && ld_out % 8 == 0 && aligned16(gate) &&
      aligned16(up) && aligned16(out)) {
    auto* kernel = silu ? gated_activation_vec8_kernel<GatedActivation::kSilu>
                        : gated_activation_vec8_kernel<GatedActivation::kGeluTanh>;
    return detail::launch_kernel(kernel, dim3(detail::ceil_div(cols, 256 * 8), rows), dim3(256), 0,
                                 stream, pdl, gate, ld_gate, up, ld_up, out, ld_out, cols);
  }
  auto* kernel = silu ? gated_activation_kernel<GatedActivation::kSilu>
                      : gated_activation_kernel<GatedActivation::kGeluTanh>;
  return detail::launch_kernel(kernel, dim3(detail::ceil_div(cols, 256 * 4), rows), dim3(256), 0,
                               stream, pdl, gate, ld_gate, up, ld_up, out, ld_out, cols);
}

}  // namespace hearth::cuda
