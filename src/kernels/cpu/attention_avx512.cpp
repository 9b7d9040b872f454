// Flash-style paged attention for AVX-512 builds (see attention_avx512.h).
// The AVX-512 intrinsics header first (kernels/cpu/intrinsics.h says why).
#include "kernels/cpu/intrinsics.h"

#include "kernels/cpu/attention_avx512.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace hearth::kernels::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
namespace {

constexpr int kKeys = 16;         // keys per block: one vector of scores
constexpr int kQueryTokens = 16;  // tokens per work item (x the GQA group = query rows)

// Per-thread state of one work item: kt [head_dim, kKeys] (the key block transposed), acc
// [rows, head_dim], running max and sum per row.
struct ItemState {
  std::vector<float> kt, acc, max, sum;
};

// One work item: tokens [t0, t0 + nt) of sequence `seq`, KV head kvh, all `group` query heads
// of it (row r = token t0 + r / group, head kvh * group + r % group). ND = head_dim / 16.
template <int ND>
void attend_item(const PagedAttentionArgs& a, const AttentionSequence& seq, int32_t t0, int nt,
                 int kvh, ItemState& st) {
  constexpr int hd = ND * 16;
  const int group = a.num_heads / a.num_kv_heads;
  const int rows = nt * group;
  const int64_t kv_stride = static_cast<int64_t>(a.num_kv_heads) * hd;
  st.kt.resize(hd * kKeys);
  st.acc.assign(static_cast<std::size_t>(rows) * hd, 0.0f);
  st.max.assign(rows, -INFINITY);
  st.sum.assign(rows, 0.0f);
  float* kt = st.kt.data();
  const int32_t slot_lo = seq.num_cached + t0;  // the first query's own KV slot
  const int32_t slot_hi = seq.num_cached + t0 + nt - 1;
  const int32_t first = a.window > 0 ? std::max(0, slot_lo - a.window + 1) : 0;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const float* vrows[kKeys];
  for (int32_t j0 = first; j0 <= slot_hi; j0 += kKeys) {
    const int nk = std::min<int32_t>(kKeys, slot_hi - j0 + 1);
    const float* krows[kKeys];
    for (int k = 0; k < kKeys; ++k) {
      krows[k] = vrows[k] = nullptr;
      if (k >= nk) continue;
      const int32_t j = j0 + k;
      const int64_t at = (seq.block_table[j / a.block_size] * static_cast<int64_t>(a.block_size) +
                          j % a.block_size) *
                             kv_stride +
                         kvh * hd;
      krows[k] = a.k_cache + at;
      vrows[k] = a.v_cache + at;
    }
    for (int v = 0; v < ND; ++v) {
      __m512 tile[kKeys];
      for (int k = 0; k < kKeys; ++k) {
        tile[k] = k < nk ? _mm512_loadu_ps(krows[k] + 16 * v) : _mm512_setzero_ps();
      }
      transpose16(tile);
      for (int c = 0; c < 16; ++c) _mm512_storeu_ps(kt + (16 * v + c) * kKeys, tile[c]);
    }
    const __m512i keys = _mm512_add_epi32(_mm512_set1_epi32(j0), lane);
    for (int r = 0; r < rows; ++r) {
      const int32_t t = t0 + r / group;
      const int h = kvh * group + r % group;
      const int32_t qslot = seq.num_cached + t;
      const int32_t lo = a.window > 0 ? qslot - a.window + 1 : 0;
      if (j0 > qslot || j0 + nk - 1 < lo) continue;  // no key of this block is visible
      const float* q = a.q + (static_cast<int64_t>(seq.first_token + t) * a.num_heads + h) * hd;
      __m512 s4[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                      _mm512_setzero_ps()};
      for (int d = 0; d < hd; d += 4) {
        for (int u = 0; u < 4; ++u) {
          s4[u] = _mm512_fmadd_ps(_mm512_set1_ps(q[d + u]), _mm512_loadu_ps(kt + (d + u) * kKeys),
                                  s4[u]);
        }
      }
      __m512 s =
          _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(s4[0], s4[1]), _mm512_add_ps(s4[2], s4[3])),
                        _mm512_set1_ps(a.scale));
      const __mmask16 visible = _mm512_cmple_epi32_mask(keys, _mm512_set1_epi32(qslot)) &
                                _mm512_cmpge_epi32_mask(keys, _mm512_set1_epi32(lo)) &
                                static_cast<__mmask16>((1u << nk) - 1u);
      const float block_max = _mm512_mask_reduce_max_ps(visible, s);
      const float m_new = std::max(st.max[r], block_max);
      const float corr = std::exp(st.max[r] - m_new);  // 0 on the first visible block
      const __m512 p =
          _mm512_maskz_mov_ps(visible, exp_ps(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
      st.sum[r] = st.sum[r] * corr + _mm512_reduce_add_ps(p);
      st.max[r] = m_new;
      alignas(64) float pk[kKeys];
      _mm512_store_ps(pk, p);
      float* acc = st.acc.data() + static_cast<int64_t>(r) * hd;
      __m512 av[ND];
      const __m512 c = _mm512_set1_ps(corr);
      for (int v = 0; v < ND; ++v) av[v] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * v), c);
      for (int k = 0; k < nk; ++k) {
        if (pk[k] == 0.0f) continue;
        const __m512 pb = _mm512_set1_ps(pk[k]);
        for (int v = 0; v < ND; ++v) {
          av[v] = _mm512_fmadd_ps(pb, _mm512_loadu_ps(vrows[k] + 16 * v), av[v]);
        }
      }
      for (int v = 0; v < ND; ++v) _mm512_storeu_ps(acc + 16 * v, av[v]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int32_t t = t0 + r / group;
    const int h = kvh * group + r % group;
    float* o = a.out + (static_cast<int64_t>(seq.first_token + t) * a.num_heads + h) * hd;
    const __m512 inv = _mm512_set1_ps(1.0f / st.sum[r]);
    for (int v = 0; v < ND; ++v) {
      _mm512_storeu_ps(o + 16 * v,
                       _mm512_mul_ps(_mm512_loadu_ps(st.acc.data() + r * hd + 16 * v), inv));
    }
  }
}

}  // namespace

bool paged_attention_avx512(CpuContext& ctx, const PagedAttentionArgs& a) {
  const int nd = a.head_dim / 16;
  if (a.head_dim % 16 != 0 || (nd != 4 && nd != 8 && nd != 16) || a.num_kv_heads <= 0 ||
      a.num_heads % a.num_kv_heads != 0) {
    return false;
  }
  // Work items: (sequence, block of kQueryTokens tokens) x KV head. Later blocks of a
  // sequence see more keys: they come first, so the pool's in-order chunks end on cheap ones
  // (in token order a causal prefill's heaviest blocks were claimed last and set the finish).
  std::vector<std::pair<int, int32_t>> blocks;
  for (int s = 0; s < a.num_sequences; ++s) {
    const int32_t nt = a.sequences[s].num_tokens;
    for (int32_t t0 = (nt - 1) / kQueryTokens * kQueryTokens; nt > 0 && t0 >= 0;
         t0 -= kQueryTokens) {
      blocks.push_back({s, t0});
    }
  }
  const int64_t items = static_cast<int64_t>(blocks.size()) * a.num_kv_heads;
  ctx.pool.parallel_for(items, 1, [&](int64_t i0, int64_t i1) {
    thread_local ItemState st;
    for (int64_t item = i0; item < i1; ++item) {
      const auto [s, t0] = blocks[item / a.num_kv_heads];
      const int kvh = static_cast<int>(item % a.num_kv_heads);
      const AttentionSequence& seq = a.sequences[s];
      const int nt = std::min<int32_t>(kQueryTokens, seq.num_tokens - t0);
      switch (nd) {
        case 4:
          attend_item<4>(a, seq, t0, nt, kvh, st);
          break;
        case 8:
          attend_item<8>(a, seq, t0, nt, kvh, st);
          break;
        default:
          attend_item<16>(a, seq, t0, nt, kvh, st);
          break;
      }
    }
  });
  return true;
}

#else

bool paged_attention_avx512(CpuContext&, const PagedAttentionArgs&) { return false; }

#endif

}  // namespace hearth::kernels::cpu
