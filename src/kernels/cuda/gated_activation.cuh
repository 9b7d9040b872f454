// The gated MLP's middle: out = act(gate) * up, elementwise, f32 inside, one rounding.
// SiLU for Llama/Mistral/Qwen, GELU with the tanh approximation for Gemma.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

enum class GatedActivation { kSilu, kGeluTanh };

// gate, up, out: [rows, cols] with their own row strides (gate and up are usually the two
// halves of one fused gate_up projection). out may alias gate.
cudaError_t gated_activation(GatedActivation act, const __nv_bfloat16* gate, int64_t ld_gate,
                             const __nv_bfloat16* up, int64_t ld_up, __nv_bfloat16* out,
                             int64_t ld_out, int rows, int cols, cudaStream_t stream,
                             bool pdl = false);

}  // namespace hearth::cuda
