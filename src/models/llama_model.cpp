// The llama-family forward pass, written top to bottom like the textbook transformer.
#include "models/llama_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/gemm_dense.h"
#include "kernels/cpu/int8_dot.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"
#include "kernels/ref/ops.h"
#include "models/batch_check.h"
#include "models/device.h"

namespace hearth {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;

namespace {

// An activation buffer left uninitialized: the forward writes each one in full before
// reading it, and zero-filling them (~50 MB for a 512-token 1B prefill) on the calling thread
// cost ~50 ms, serial time that 16 threads cannot share.
class Activations {
 public:
  explicit Activations(int64_t n) : p_(new float[static_cast<std::size_t>(n)]) {}
  float* data() { return p_.get(); }
  float& operator[](int64_t i) { return p_[i]; }

 private:
  std::unique_ptr<float[]> p_;
};

// 16-row blocks prepare_rows16 and prepare_panels16 convert at a time.
constexpr int64_t kInterleaveLoadBlocks = 256;

}  // namespace

LlamaModel::LlamaModel(ModelConfig config, WeightStore store, LlamaWeights weights,
                       std::unique_ptr<cpu::CpuContext> ctx, const LoadOptions& options)
    : config_(std::move(config)),
      store_(std::move(store)),
      weights_(std::move(weights)),
      kernels_(options.kernels),
      ctx_(std::move(ctx)),
      rope_(rope_tables(config_)) {
  ctx_->int8_dot = options.cpu_int8_dot;
  // The bf16 prefill GEMM rounds activations that decode's mat-vec does not, so a decode row
  // in a step of 5+ rows would sum differently than alone: batch invariance takes precedence.
  ctx_->bf16_dot = options.cpu_bf16_dot && !options.batch_invariant;
  ctx_->batch_invariant = options.batch_invariant;
}

std::size_t LlamaModel::kv_bytes_per_block(int block_size) const {
  return 2ull * config_.num_layers * block_size * config_.kv_dim() * sizeof(float);
}

Status LlamaModel::create_kv_cache(int num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return invalid_argument_error("KV cache needs positive blocks and block size, got {} x {}",
                                  num_blocks, block_size);
  }
  k_cache_.clear();
  v_cache_.clear();
  const std::size_t bytes =
      static_cast<std::size_t>(num_blocks) * block_size * config_.kv_dim() * sizeof(float);
  for (int l = 0; l < config_.num_layers; ++l) {
    HEARTH_ASSIGN_OR_RETURN(Buffer k, Buffer::allocate(bytes));
    HEARTH_ASSIGN_OR_RETURN(Buffer v, Buffer::allocate(bytes));
    k_cache_.push_back(std::move(k));
    v_cache_.push_back(std::move(v));
  }
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  return ok_status();
}

Status LlamaModel::copy_kv_block(int src, int dst) {
  if (src < 0 || dst < 0 || src >= num_blocks_ || dst >= num_blocks_) {
    return invalid_argument_error("KV block copy {} -> {} outside 0..{}", src, dst, num_blocks_);
  }
  const std::size_t block_bytes =
      static_cast<std::size_t>(block_size_) * config_.kv_dim() * sizeof(float);
  for (int l = 0; l < config_.num_layers; ++l) {
    for (Buffer* cache : {&k_cache_[l], &v_cache_[l]}) {
      auto* base = static_cast<uint8_t*>(cache->data());
      std::memmove(base + dst * block_bytes, base + src * block_bytes, block_bytes);
    }
  }
  return ok_status();
}

std::string LlamaModel::describe() const {
  std::string weights = std::string(dtype_name(weights_.layers[0].q.w.dtype));
  if (weights_.layers[0].q.w.quantized()) {
    weights = fmt::format("{}-bit group {} (scales {})", weights_.layers[0].q.w.bits,
                          weights_.layers[0].q.w.group_size,
                          dtype_name(weights_.layers[0].q.w.scale_dtype));
  }
  const bool int8 = kernels_ == KernelKind::kCpu && ctx_->int8_dot &&
                    cpu::int8_dot_supported(weights_.layers[0].q.w);
  const bool bf16 = kernels_ == KernelKind::kCpu && ctx_->bf16_dot &&
                    cpu::bf16_dot_supported(weights_.layers[0].q.w);
  const bool rows16 = int8 && weights_.layers[0].q.w.rows16 != nullptr;
  // Float (or quantized off the int8 path) linears under batch invariance: one kernel family.
  const bool tiles = kernels_ == KernelKind::kCpu && ctx_->batch_invariant && !int8;
  return fmt::format("{} kernels, {} threads, {}, {}, weights {}, prefill GEMM {}",
                     kernels_ == KernelKind::kCpu ? "cpu" : "reference", ctx_->pool.size(),
                     cpu::simd_name(),
                     rows16 ? "int8 activations x quantized weights (avx512-vnni), batch-invariant "
                              "decode"
                     : int8 ? "int8 activations x quantized weights (avx512-vnni)"
                     : bf16 ? "bf16 activations x bf16 weights in prefill (avx512-bf16)"
                     : tiles ? "f32 compute, batch-invariant"
                             : "f32 compute",
                     weights,
                     int8    ? "int8 vnni tiles"
                     : bf16  ? cpu::bf16_dot_kernel_name()
                     : tiles ? "the cache-blocked GEMM's order at every row count (float weights; "
                               "4x4 dot-product tiles for quantized ones)"
                     : kernels_ == KernelKind::kCpu ? cpu::prefill_gemm_name(*ctx_)
                                                    : "reference loops");
}

Status LlamaModel::validate(const ForwardBatch& b, std::span<float> logits) const {
  if (num_blocks_ == 0) return invalid_argument_error("forward before create_kv_cache");
  HEARTH_RETURN_IF_ERROR(validate_forward_batch(b, config_.vocab_size, num_blocks_, block_size_));
  if (logits.size() != b.logit_rows.size() * static_cast<std::size_t>(config_.vocab_size)) {
    return invalid_argument_error("logits span of {} floats, need {} x {}", logits.size(),
                                  b.logit_rows.size(), config_.vocab_size);
  }
  return ok_status();
}

void LlamaModel::linear(const Linear& l, const float* x, int64_t m, float* y) {
  if (kernels_ == KernelKind::kCpu) {
    cpu::linear(*ctx_, l.w, x, m, y);
  } else {
    ref::linear(l.w, x, m, y);
  }
  if (!l.bias.empty()) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t r = 0; r < l.w.rows; ++r) y[i * l.w.rows + r] += l.bias[r];
    }
  }
}

void LlamaModel::residual_add(float* x, const float* h, int64_t n) {
  if (kernels_ == KernelKind::kCpu) {
    cpu::add_inplace(*ctx_, x, h, n);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] += h[i];
  }
}

void LlamaModel::rms_norm(const float* x, const std::vector<float>& w, int64_t rows, int64_t dim,
                          float* out) {
  if (kernels_ == KernelKind::kCpu) {
    cpu::rms_norm(*ctx_, x, w.data(), rows, dim, config_.rms_norm_eps, out);
  } else {
    ref::rms_norm(x, w.data(), rows, dim, config_.rms_norm_eps, out);
  }
}

void LlamaModel::rope(float* x, const int32_t* positions, int64_t tokens, int heads,
                      const RopeTables& t) {
  if (kernels_ == KernelKind::kCpu) {
    cpu::rope(*ctx_, x, positions, tokens, heads, config_.head_dim, t.inv_freq.data(),
              t.attention_factor);
  } else {
    ref::rope(x, positions, tokens, heads, config_.head_dim, t.inv_freq.data(), t.attention_factor);
  }
}

Status LlamaModel::forward(const ForwardBatch& batch, std::span<float> logits) {
  HEARTH_RETURN_IF_ERROR(validate(batch, logits));
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t hidden = c.hidden_size;
  const int64_t kv_dim = c.kv_dim();
  const bool fast = kernels_ == KernelKind::kCpu;

  // Dynamic NTK rescales rope by the longest sequence in the step (as transformers does
  // per forward call); every other type uses the tables computed at load.
  RopeTables rope_step = rope_;
  if (c.rope.type == RopeType::kDynamic) {
    int64_t longest = 0;
    for (const auto& s : batch.sequences) {
      longest = std::max<int64_t>(longest, static_cast<int64_t>(s.num_cached) + s.num_tokens);
    }
    rope_step = rope_tables(c, longest);
  }

  std::vector<kernels::AttentionSequence> seqs;
  for (const auto& s : batch.sequences) {
    seqs.push_back({s.first_token, s.num_tokens, s.num_cached, s.block_table.data()});
  }
  // KV slot (block * block_size + offset) of every batch token.
  std::vector<int64_t> slot_of(static_cast<std::size_t>(n));
  for (const auto& s : batch.sequences) {
    for (int32_t t = 0; t < s.num_tokens; ++t) {
      const int64_t logical = s.num_cached + t;
      slot_of[s.first_token + t] =
          static_cast<int64_t>(s.block_table[logical / block_size_]) * block_size_ +
          logical % block_size_;
    }
  }

  Activations x(n * hidden);                  // [n, hidden]
  Activations h(n * hidden);                  // [n, hidden]
  Activations q(n * c.q_dim());               // [n, heads, head_dim]
  Activations k(n * kv_dim);                  // [n, kv_heads, head_dim]
  Activations v(n * kv_dim);                  // [n, kv_heads, head_dim]
  Activations attn(n * c.q_dim());            // [n, heads, head_dim]
  Activations gate(n * c.intermediate_size);  // [n, inter]
  Activations up(n * c.intermediate_size);    // [n, inter]

  if (fast) {
    cpu::embedding(*ctx_, weights_.embed, batch.tokens.data(), n, x.data());
  } else {
    ref::embedding(weights_.embed, batch.tokens.data(), n, x.data());
  }

  for (int l = 0; l < c.num_layers; ++l) {
    LlamaLayer& layer = weights_.layers[l];
    // Attention block: x += o_proj(attention(rope(q), rope(k), v)).
    rms_norm(x.data(), layer.input_norm, n, hidden, h.data());
    linear(layer.q, h.data(), n, q.data());
    linear(layer.k, h.data(), n, k.data());
    linear(layer.v, h.data(), n, v.data());
    if (c.qk_norm) {
      rms_norm(q.data(), layer.q_norm, n * c.num_heads, c.head_dim, q.data());
      rms_norm(k.data(), layer.k_norm, n * c.num_kv_heads, c.head_dim, k.data());
    }
    rope(q.data(), batch.positions.data(), n, c.num_heads, rope_step);
    rope(k.data(), batch.positions.data(), n, c.num_kv_heads, rope_step);
    auto* k_cache = static_cast<float*>(k_cache_[l].data());
    auto* v_cache = static_cast<float*>(v_cache_[l].data());
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(k_cache + slot_of[t] * kv_dim, k.data() + t * kv_dim, kv_dim * sizeof(float));
      std::memcpy(v_cache + slot_of[t] * kv_dim, v.data() + t * kv_dim, kv_dim * sizeof(float));
    }
    kernels::PagedAttentionArgs args;
    args.q = q.data();
    args.out = attn.data();
    args.k_cache = k_cache;
    args.v_cache = v_cache;
    args.num_heads = c.num_heads;
    args.num_kv_heads = c.num_kv_heads;
    args.head_dim = c.head_dim;
    args.block_size = block_size_;
    args.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    args.window = c.sliding_window && c.layer_uses_window[l] ? *c.sliding_window : 0;
    args.sequences = seqs.data();
    args.num_sequences = static_cast<int>(seqs.size());
    if (fast) {
      cpu::paged_attention(*ctx_, args);
    } else {
      ref::paged_attention(args);
    }
    linear(layer.o, attn.data(), n, h.data());
    residual_add(x.data(), h.data(), n * hidden);

    // MLP block: x += down(silu(gate(h)) * up(h)).
    rms_norm(x.data(), layer.post_norm, n, hidden, h.data());
    linear(layer.gate, h.data(), n, gate.data());
    linear(layer.up, h.data(), n, up.data());
    if (fast) {
      cpu::silu_mul(*ctx_, gate.data(), up.data(), n, c.intermediate_size, gate.data());
    } else {
      ref::silu_mul(gate.data(), up.data(), n, c.intermediate_size, gate.data());
    }
    linear(layer.down, gate.data(), n, h.data());
    residual_add(x.data(), h.data(), n * hidden);
  }

  // Logits only for the rows asked for: final norm, then the (maybe tied) head.
  const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());
  if (rows == 0) return ok_status();
  std::vector<float> last(static_cast<std::size_t>(rows * hidden));  // [rows, hidden]
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(last.data() + i * hidden, x.data() + batch.logit_rows[i] * hidden,
                hidden * sizeof(float));
  }
  rms_norm(last.data(), weights_.final_norm, rows, hidden, last.data());
  linear(Linear{weights_.lm_head, {}}, last.data(), rows, logits.data());
  return ok_status();
}

namespace {

// fn(w) for every projection the CPU kernels multiply by: each layer's q, k, v, o, gate, up and
// down, then the head.
template <typename F>
Status for_each_projection(LlamaWeights& weights, F&& fn) {
  for (LlamaLayer& l : weights.layers) {
    for (Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      HEARTH_RETURN_IF_ERROR(fn(lin->w));
    }
  }
  return fn(weights.lm_head);
}

// interleave(b0, b1) over the 16-row blocks of a rows-row matrix, kInterleaveLoadBlocks blocks
// a chunk, each chunk's blocks split across pool's threads; after each chunk,
// done(the chunk's first row, rows converted so far) (the caller drops those rows' file pages:
// no matrix is held twice).
template <typename Interleave, typename Done>
void interleave_in_chunks(cpu::ThreadPool& pool, int64_t rows, Interleave&& interleave,
                          Done&& done) {
  const int64_t blocks = (rows + 15) / 16;
  for (int64_t b0 = 0; b0 < blocks; b0 += kInterleaveLoadBlocks) {
    const int64_t b1 = std::min(blocks, b0 + kInterleaveLoadBlocks);
    pool.parallel_for(b1 - b0, 8, [&](int64_t a, int64_t b) { interleave(b0 + a, b0 + b); });
    done(b0 * 16, std::min(b1 * 16, rows));
  }
}

}  // namespace

Status prepare_rows16(LlamaWeights& weights, const WeightStore& store, cpu::ThreadPool& pool) {
  // After its rows16 copies are built int8_linear reads nothing else of a matrix, so the
  // row-major codes, scales and biases are released at once (one matrix's worth resident at a
  // time): an owned aligned copy is freed, a tensor in the file mapping loses its whole pages.
  // A tied head's embedding then gathers token rows from the same rows16 copy
  // (cpu::weight_rows_f32 reads it when the row-major codes are gone).
  auto release = [&](const void*& p, std::size_t bytes) {
    auto owned = std::find_if(weights.owned.begin(), weights.owned.end(),
                              [&](const Buffer& b) { return b.data() == p; });
    if (owned != weights.owned.end()) {
      weights.owned.erase(owned);
      weights.released_bytes += bytes;
    } else {
      weights.released_bytes += store.drop_pages(p, bytes);
    }
    p = nullptr;
  };
  auto prepare = [&](kernels::WeightMatrix& w) -> Status {
    if (!cpu::rows16_wanted(w)) return ok_status();
    const cpu::Rows16Bytes bytes = cpu::rows16_bytes(w);
    // interleave_rows16_blocks writes every byte (rows past w.rows as zeros).
    HEARTH_ASSIGN_OR_RETURN(Buffer codes, Buffer::allocate_for_overwrite(bytes.codes));
    HEARTH_ASSIGN_OR_RETURN(Buffer scales, Buffer::allocate_for_overwrite(bytes.side));
    HEARTH_ASSIGN_OR_RETURN(Buffer biases, Buffer::allocate_for_overwrite(bytes.side));
    // 4096 rows at a time, dropping the file pages of the codes read so far after each: the
    // load never holds a whole matrix twice (8-bit 8B: lm_head alone is 525 MB). A copied
    // (owned) tensor is freed by release() below; drop_pages leaves it alone.
    const auto* src = static_cast<const uint8_t*>(w.data);
    const int64_t row_bytes = w.cols * w.bits / 8;
    interleave_in_chunks(
        pool, w.rows,
        [&](int64_t b0, int64_t b1) {
          cpu::interleave_rows16_blocks(w, b0, b1, static_cast<uint8_t*>(codes.data()),
                                        scales.data(), biases.data());
        },
        [&](int64_t, int64_t rows_done) {
          store.drop_pages(src, static_cast<std::size_t>(rows_done * row_bytes));
        });
    w.rows16 = codes.data();
    w.rows16_scales = scales.data();
    w.rows16_biases = biases.data();
    weights.interleaved_bytes += bytes.codes + 2 * bytes.side;
    weights.owned.push_back(std::move(codes));
    weights.owned.push_back(std::move(scales));
    weights.owned.push_back(std::move(biases));
    const bool tied = w.data == weights.embed.data;
    const std::size_t side =
        static_cast<std::size_t>(w.rows * (w.cols / w.group_size)) * dtype_size(w.scale_dtype);
    release(w.data, static_cast<std::size_t>(w.rows * w.cols * w.bits / 8));
    release(w.scales, side);
    release(w.biases, side);
    if (tied) weights.embed = w;
    return ok_status();
  };
  return for_each_projection(weights, prepare);
}

Status prepare_panels16(LlamaWeights& weights, const WeightStore& store, cpu::ThreadPool& pool) {
  auto prepare = [&](kernels::WeightMatrix& w) -> Status {
    if (!cpu::panels16_wanted(w) || w.panels16 != nullptr) return ok_status();
    const std::size_t bytes = cpu::panels16_bytes(w);
    HEARTH_ASSIGN_OR_RETURN(Buffer copy, Buffer::allocate_for_overwrite(bytes));
    const std::size_t row_bytes = static_cast<std::size_t>(w.cols) * dtype_size(w.dtype);
    const bool owned = std::any_of(weights.owned.begin(), weights.owned.end(),
                                   [&](const Buffer& b) { return b.data() == w.data; });
    interleave_in_chunks(
        pool, w.rows,
        [&](int64_t g0, int64_t g1) { cpu::interleave_panels16_blocks(w, g0, g1, copy.data()); },
        [&](int64_t rows_from, int64_t rows_done) {
          if (owned) return;
          weights.released_bytes +=
              store.drop_pages(static_cast<const uint8_t*>(w.data) + rows_from * row_bytes,
                               static_cast<std::size_t>(rows_done - rows_from) * row_bytes);
        });
    const bool tied = w.data == weights.embed.data;
    w.panels16 = copy.data();
    weights.interleaved_bytes += bytes;
    weights.owned.push_back(std::move(copy));
    if (tied) weights.embed.panels16 = w.panels16;
    return ok_status();
  };
  return for_each_projection(weights, prepare);
}

Result<std::unique_ptr<Model>> load_model(const std::string& dir, const LoadOptions& options) {
  if (options.device == Device::kCuda) return load_cuda_model_from(dir, options);
  HEARTH_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  auto store = WeightStore::open(dir);
  if (!store.ok()) return store.status().with_context(fmt::format("loading {}", dir));
  auto weights = load_llama_weights(config, *store);
  if (!weights.ok()) return weights.status().with_context(fmt::format("loading {}", dir));
  LoadOptions resolved = options;
  const bool int8_path = options.kernels == KernelKind::kCpu && options.cpu_int8_dot &&
                         !weights->layers.empty() && cpu::rows16_wanted(weights->layers[0].q.w);
  if (options.batch_invariant_auto) resolved.batch_invariant = int8_path;
  auto ctx = std::make_unique<cpu::CpuContext>(options.threads);
  if (options.kernels == KernelKind::kCpu && options.cpu_int8_dot && resolved.batch_invariant) {
    HEARTH_RETURN_IF_ERROR(prepare_rows16(*weights, *store, ctx->pool));
  }
  if (options.kernels == KernelKind::kCpu && resolved.batch_invariant) {
    HEARTH_RETURN_IF_ERROR(prepare_panels16(*weights, *store, ctx->pool));
  }
  return std::unique_ptr<Model>(
      std::make_unique<LlamaModel>(std::move(config), std::move(store).value(),
                                   std::move(weights).value(), std::move(ctx), resolved));
}

}  // namespace hearth
