// Gated activation: a 2-D grid stride loop; memory bound (two reads, one write).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/gated_activation.cuh"

namespace hearth::cuda {
namespace {

template <GatedActivation kAct>
__global__ void gated_activation_kernel(const __nv_bfloat16* gate, int64_t ld_gate,
                                        const __nv_bfloat16* up, int64_t ld_up, __nv_bfloat16* out,
                                        int64_t ld_out, int cols) {
  int row = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
    float g = __bfloat162float(gate[row * ld_gate + i]);
    float u = __bfloat162float(up[row * ld_up + i]);
    float v = kAct == GatedActivation::kSilu ? detail::silu_mul(g, u) : detail::gelu_tanh_mul(g, u);
    out[row * ld_out + i] = __float2bfloat16(v);
  }
}

}  // namespace

cudaError_t gated_activation(GatedActivation act, const __nv_bfloat16* gate, int64_t ld_gate,
                             const __nv_bfloat16* up, int64_t ld_up, __nv_bfloat16* out,
                             int64_t ld_out, int rows, int cols, cudaStream_t stream) {
  if (rows < 0 || cols <= 0 || ld_gate < cols || ld_up < cols || ld_out < cols || rows > 65535) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  dim3 grid(detail::ceil_div(cols, 256 * 4) > 0 ? detail::ceil_div(cols, 256 * 4) : 1, rows);
  if (act == GatedActivation::kSilu) {
    gated_activation_kernel<GatedActivation::kSilu>
        <<<grid, 256, 0, stream>>>(gate, ld_gate, up, ld_up, out, ld_out, cols);
  } else {
    gated_activation_kernel<GatedActivation::kGeluTanh>
        <<<grid, 256, 0, stream>>>(gate, ld_gate, up, ld_up, out, ld_out, cols);
  }
  return cudaGetLastError();
}

}  // namespace hearth::cuda
