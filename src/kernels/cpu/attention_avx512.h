// Paged attention on AVX-512, flash-style: the query rows of one KV head and a block of
// tokens share each 16-key block, transposed once so one vector holds 16 keys' scores;
// softmax runs online (per-row running max and sum) with a vector exp. The plain loop in
// ops.cpp serves head sizes this one does not take and non-AVX-512 builds.
#pragma once

#include "kernels/cpu/thread_pool.h"
#include "kernels/weight.h"

namespace hearth::kernels::cpu {

// False (nothing written) when this build has no AVX-512 or head_dim is not 64, 128 or 256.
bool paged_attention_avx512(CpuContext& ctx, const PagedAttentionArgs& args);

}  // namespace hearth::kernels::cpu
