// The llama-family forward on the GPU, top to bottom like models/llama_model.cpp's CPU pass,
// but over device buffers: embedding -> per layer (norm, fused qkv, rope + KV write, paged
// attention, o, norm, fused gate_up, SiLU gate, down) -> final norm -> logits rows.
#include "models/cuda/cuda_llama_model.h"

#include <cuda_bf16.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <numeric>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/bias_add.cuh"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope_kv_write.cuh"
#include "kernels/cuda/sampling.cuh"
#include "models/batch_check.h"
#include "models/cuda/device_sampler.h"
#include "models/cuda/step_clock.h"
#include "models/llama_model.h"
#include "models/rope.h"
#include "models/safetensors.h"

namespace hearth {
namespace {

using Bf16 = __nv_bfloat16;
using cuda::cuda_status;
using cuda::DeviceBuffer;
using cuda::DeviceContext;

// One projection on the device: dense bf16, or MLX-affine packed + scales + biases.
struct DeviceLinear {
  int n = 0;                  // output features (rows)
  int k = 0;                  // input features
  DeviceBuffer w;             // bf16 [n, k] when dense
  DeviceBuffer packed;        // u32 [n, k * bits / 32] when quantized
  DeviceBuffer scales;        // [n, k / group] bf16 or f16
  DeviceBuffer biases;        // [n, k / group]
  cuda::AffineQuantWeight q;  // views of the three above
  DeviceBuffer bias;          // bf16 [n] or empty
  int row_block = 0;          // two stacked parts: 0 part after part; b > 0 blocks of b rows
                              // of the first part, then the same b rows of the second
  bool quantized() const { return q.packed != nullptr; }
  // y[m, n] = x[m, k] · wᵀ as one cuBLASLt GEMM (on w, or a quantized weight's bf16 copy),
  // y bf16 or f32 (logits); everything row-major and packed.
  cuda::GemmShape gemm(int m, bool f32_out) const {
    return {m, n, k, k, k, n, f32_out ? cuda::GemmOut::kF32 : cuda::GemmOut::kBf16, false};
  }
};

struct DeviceLayer {
  DeviceBuffer input_norm;  // bf16 [hidden]
  DeviceBuffer post_norm;   // bf16 [hidden]
  DeviceBuffer q_norm;      // bf16 [head_dim] (qwen3) or empty
  DeviceBuffer k_norm;      // bf16 [head_dim] (qwen3) or empty
  DeviceLinear qkv;         // [q_dim + 2 kv_dim, hidden]: q rows, then k, then v
  DeviceLinear o;           // [hidden, q_dim]
  DeviceLinear gate_up;     // [2 inter, hidden]: gate rows, then up
  DeviceLinear down;        // [hidden, inter]
};

std::vector<uint16_t> to_bf16_bits(const float* v, std::size_t n) {
  std::vector<uint16_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// Allocates the device tensors and queues their bytes; finish() uploads everything at once
// (DeviceContext::upload: threads, pinned staging, async DMA). Keeps the host copies of
// converted tensors alive until then.
class Uploader {
 public:
  Uploader(DeviceContext& ctx, std::size_t total, bool progress, int threads)
      : ctx_(ctx), total_(total), progress_(progress), threads_(threads) {}

  // Queues n bytes from src (which must outlive finish()).
  Status copy(void* dst, const void* src, std::size_t n, const std::string& /*what*/) {
    jobs_.push_back({dst, src, n});
    return ok_status();
  }

  // Queues a host copy made here (converted data).
  Status copy_owned(void* dst, std::vector<uint16_t> bits, const std::string& what) {
    owned_.push_back(std::move(bits));
    return copy(dst, owned_.back().data(), owned_.back().size() * 2, what);
  }

  Result<DeviceBuffer> vector(const std::vector<float>& v, const std::string& what) {
    HEARTH_ASSIGN_OR_RETURN(DeviceBuffer buf, ctx_.allocate(v.size() * 2, what));
    HEARTH_RETURN_IF_ERROR(copy_owned(buf.data(), to_bf16_bits(v.data(), v.size()), what));
    return buf;
  }

  // Runs every queued copy; returns when the weights are on the device.
  Status finish() {
    cuda::UploadOptions options;
    options.threads = threads_;
    std::atomic<std::size_t> last_decile{0};
    if (progress_ && total_ > 0) {
      options.progress = [&](std::size_t done, std::size_t) {
        const std::size_t decile = done * 10 / total_;
        std::size_t seen = last_decile.load();
        if (decile > seen && last_decile.compare_exchange_strong(seen, decile)) {
          spdlog::info("uploading weights: {:.1f} / {:.1f} GB", done / 1e9, total_ / 1e9);
        }
      };
    }
    std::size_t queued = 0;
    for (const auto& j : jobs_) queued += j.bytes;
    Stopwatch watch;
    HEARTH_RETURN_IF_ERROR(ctx_.upload(jobs_, options));
    const double s = watch.elapsed_seconds();
    spdlog::debug("cuda load: uploaded {:.2f} GB in {:.0f} ms ({:.1f} GB/s)", queued / 1e9, s * 1e3,
                  queued / 1e9 / std::max(s, 1e-9));
    jobs_.clear();
    owned_.clear();
    return ok_status();
  }

  // Stacks the parts' rows into one matrix (fused q/k/v, gate/up); row_block > 0 (two bf16
  // parts of equal rows, no bias) alternates blocks of that many rows of each part.
  Result<DeviceLinear> linear(const std::vector<const Linear*>& parts, const std::string& what,
                              int row_block = 0) {
    DeviceLinear d;
    const kernels::WeightMatrix& first = parts[0]->w;
    d.k = static_cast<int>(first.cols);
    for (const Linear* p : parts) {
      const kernels::WeightMatrix& w = p->w;
      if (w.cols != first.cols || w.bits != first.bits || w.group_size != first.group_size ||
          (w.quantized() && w.scale_dtype != first.scale_dtype)) {
        return unsupported_error("{}: fused parts differ in shape or quantization", what);
      }
      d.n += static_cast<int>(w.rows);
    }
    bool any_bias =
        std::any_of(parts.begin(), parts.end(), [](const Linear* p) { return !p->bias.empty(); });
    if (row_block > 0 && parts.size() == 2 && !first.quantized() && !any_bias &&
        first.dtype == DType::kBF16 && parts[1]->w.dtype == DType::kBF16 &&
        parts[1]->w.rows == first.rows && first.rows % row_block == 0) {
      HEARTH_ASSIGN_OR_RETURN(d.w, ctx_.allocate(std::size_t(d.n) * d.k * 2, what));
      d.row_block = row_block;
      const std::size_t block_bytes = static_cast<std::size_t>(row_block) * d.k * 2;
      const std::size_t blocks = static_cast<std::size_t>(first.rows) / row_block;
      for (std::size_t b = 0; b < blocks; ++b) {
        for (std::size_t p = 0; p < 2; ++p) {
          HEARTH_RETURN_IF_ERROR(copy(static_cast<char*>(d.w.data()) + (2 * b + p) * block_bytes,
                                      static_cast<const char*>(parts[p]->w.data) + b * block_bytes,
                                      block_bytes, what));
        }
      }
      return d;
    }
    if (!first.quantized()) {
      HEARTH_ASSIGN_OR_RETURN(d.w, ctx_.allocate(std::size_t(d.n) * d.k * 2, what));
      std::size_t offset = 0;
      for (const Linear* p : parts) {
        const kernels::WeightMatrix& w = p->w;
        const std::size_t n = static_cast<std::size_t>(w.rows) * w.cols;
        auto* dst = static_cast<char*>(d.w.data()) + offset;
        if (w.dtype == DType::kBF16) {
          HEARTH_RETURN_IF_ERROR(copy(dst, w.data, n * 2, what));
        } else {
          std::vector<uint16_t> bits(n);
          for (std::size_t i = 0; i < n; ++i) {
            float f = w.dtype == DType::kF32 ? static_cast<const float*>(w.data)[i]
                                             : f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
            bits[i] = f32_to_bf16(f);
          }
          HEARTH_RETURN_IF_ERROR(copy_owned(dst, std::move(bits), what));
        }
        offset += n * 2;
      }
    } else {
      const int groups = d.k / first.group_size;
      const std::size_t row_words = static_cast<std::size_t>(d.k) * first.bits / 32;
      const bool f32_scales = first.scale_dtype == DType::kF32;
      HEARTH_ASSIGN_OR_RETURN(d.packed, ctx_.allocate(d.n * row_words * 4, what));
      HEARTH_ASSIGN_OR_RETURN(d.scales, ctx_.allocate(std::size_t(d.n) * groups * 2, what));
      HEARTH_ASSIGN_OR_RETURN(d.biases, ctx_.allocate(std::size_t(d.n) * groups * 2, what));
      std::size_t row = 0;
      for (const Linear* p : parts) {
        const kernels::WeightMatrix& w = p->w;
        const std::size_t rows = static_cast<std::size_t>(w.rows);
        HEARTH_RETURN_IF_ERROR(copy(static_cast<uint32_t*>(d.packed.data()) + row * row_words,
                                    w.data, rows * row_words * 4, what));
        for (auto [src, dst] : {std::pair{w.scales, &d.scales}, std::pair{w.biases, &d.biases}}) {
          auto* out = static_cast<uint16_t*>(dst->data()) + row * groups;
          if (f32_scales) {
            // f32 side tensors are rounded to bf16 (the GEMV reads 16-bit scales).
            HEARTH_RETURN_IF_ERROR(
                copy_owned(out, to_bf16_bits(static_cast<const float*>(src), rows * groups), what));
          } else {
            HEARTH_RETURN_IF_ERROR(copy(out, src, rows * groups * 2, what));
          }
        }
        row += rows;
      }
      d.q = {d.packed.as<uint32_t>(),
             d.scales.data(),
             d.biases.data(),
             first.scale_dtype == DType::kF16,
             d.n,
             d.k,
             first.bits,
             first.group_size};
    }
    if (any_bias) {
      std::vector<float> bias;
      for (const Linear* p : parts) {
        if (p->bias.empty()) {
          bias.insert(bias.end(), static_cast<std::size_t>(p->w.rows), 0.0f);
        } else {
          bias.insert(bias.end(), p->bias.begin(), p->bias.end());
        }
      }
      HEARTH_ASSIGN_OR_RETURN(d.bias, vector(bias, what + " bias"));
    }
    return d;
  }

 private:
  DeviceContext& ctx_;
  std::size_t total_;
  bool progress_;
  int threads_;
  std::vector<cuda::UploadJob> jobs_;
  std::deque<std::vector<uint16_t>> owned_;
};

// The GEMM options of a model: HEARTH_WGMMA_GEMM's, batch-invariant on request.
cuda::GemmBf16Options gemm_options(bool batch_invariant) {
  cuda::GemmBf16Options options = cuda::GemmBf16Options::from_env();
  options.batch_invariant = batch_invariant;
  return options;
}

class CudaLlamaModel : public Model {
 public:
  CudaLlamaModel(ModelConfig config, std::unique_ptr<DeviceContext> ctx, bool compiled_decode,
                 int upload_threads, int gate_up_block, cuda::AffineGemvKernel affine_kernel,
                 bool tiled_weights, bool batch_invariant)
      : config_(std::move(config)),
        ctx_(std::move(ctx)),
        gemm_(*ctx_, gemm_options(batch_invariant)),
        sampler_(*ctx_),
        compiled_decode_(compiled_decode),
        upload_threads_(upload_threads),
        gate_up_block_(gate_up_block),
        affine_kernel_(affine_kernel),
        tiled_weights_(tiled_weights) {}
  ~CudaLlamaModel() override {
    if (host_release_.valid()) host_release_.wait();
    Stopwatch watch;
    clear_graphs();
    layers_.clear();
    k_cache_.clear();
    v_cache_.clear();
    spdlog::debug("cuda model: weights and KV freed in {:.0f} ms", watch.elapsed_ms());
  }

  Status load(const LlamaWeights& w, std::size_t total_bytes, bool progress);
  // Drops the mapped shards on a background thread (joined by the destructor).
  void release_host_weights(std::unique_ptr<std::pair<WeightStore, LlamaWeights>> host) {
    host_release_ = std::async(std::launch::async, [h = std::move(host)]() mutable {
      Stopwatch watch;
      h.reset();
      spdlog::debug("cuda load: shards unmapped in {:.0f} ms (in the background)",
                    watch.elapsed_ms());
    });
  }

  const ModelConfig& config() const override { return config_; }
  Status create_kv_cache(int num_blocks, int block_size) override;
  int kv_num_blocks() const override { return num_blocks_; }
  int kv_block_size() const override { return block_size_; }
  std::size_t kv_bytes_per_block(int block_size) const override {
    return 2ull * config_.num_layers * block_size * config_.kv_dim() * sizeof(Bf16);
  }
  Status copy_kv_block(int src, int dst) override;
  Status forward(const ForwardBatch& batch, std::span<float> logits) override;
  bool samples_on_device() const override { return true; }
  Status forward_sample(const ForwardBatch& batch, std::span<const RowSampling> rows,
                        std::span<int32_t> tokens, std::span<float> host_logits) override;
  Status warm_up(int max_tokens, int max_rows) override;
  std::optional<DeviceMemoryUsage> device_memory() const override;
  std::size_t weight_bytes() const override { return weight_bytes_; }
  std::string describe() const override;

 private:
  Status validate(const ForwardBatch& b) const;
  Status ensure(DeviceBuffer& buf, std::size_t bytes, const char* what);
  // Kernels launch as programmatic dependents (PDL) on sm_90 and later.
  bool pdl() const { return ctx_->properties().major >= 9; }
  // CudaLoadOptions::batch_invariant, held by the GEMM it configures.
  bool batch_invariant() const { return gemm_.batch_invariant(); }
  // y[m, l.n] = x[m, l.k] · l.wᵀ (+ bias); y bf16, or f32 for logits.
  Status linear(const DeviceLinear& l, const Bf16* x, int m, void* y, bool f32_out);
  // The decode GEMV with its fusions (dense weights, m <= kGemvRoutedMaxRows): y = epi(x' · l.wᵀ
  // + bias), x' = rmsnorm(x) * norm when norm is set; programmatic dependent launch on sm_90.
  cuda::GemvArgs gemv_args(const DeviceLinear& l, const Bf16* x, int m, void* y,
                           cuda::GemvEpilogue epi, const DeviceBuffer* norm) const;
  // gemv_args' contract on a quantized weight (m <= kAffineGemvMaxRows, no bias): the
  // affine GEMV with its fusions, on affine_kernel_.
  cuda::AffineGemvArgs affine_args(const DeviceLinear& l, const Bf16* x, int m, void* y,
                                   cuda::GemvEpilogue epi, const DeviceBuffer* norm) const;
  // True when a step of n tokens can run the fused decode layer body: n small and every
  // shape supported by the fused GEMV, dense (gemv_bf16) or, unless affine_kernel_ is
  // kRegister, quantized in every projection of every layer (affine_gemv).
  bool fused_decode(int n) const;
  bool fused_affine_layer(const DeviceLayer& l, int n) const;
  // At load: when every layer runs the fused decode step on the tensor-core GEMV (and
  // HEARTH_AFFINE_LAYOUT allows), relays qkv (RoPE pairs where the step fuses RoPE), o,
  // gate_up (gated pairs), down and an untied logits projection into their tiled layouts, in
  // place of the row-major copies (the same bits; 11-20 % faster GEMVs on the H200). Calls the
  // layout does not serve at m <= 8 store rows through it; larger m dequantize from it.
  Status tile_for_decode();
  Status tile(DeviceLinear& l, cuda::AffineLayout layout, int head_dim);
  Status embed(const int32_t* ids, int n, Bf16* out);

  // What one step's device work depends on besides the data in meta_: equal keys replay
  // the same graph.
  struct StepShape {
    int n, num_seqs, ld_table, splits, split_keys, rows;
    bool all_rows;  // the logit rows are the tokens 0 .. n - 1 in order (a decode step)
    std::size_t off_tokens, off_pos, off_slots, off_qs, off_kv, off_tables, off_rows, off_freq;
    bool greedy;  // the step ends with each row's argmax in greedy_out_
    auto key() const {
      return std::make_tuple(n, num_seqs, ld_table, splits, split_keys, rows, all_rows, off_freq,
                             greedy);
    }
  };
  // Embedding through the logits of shape.rows rows into logits_ (no host sync); with
  // shape.greedy, then each row's argmax into greedy_out_.
  Status run_step(const StepShape& shape);
  Status run_forward(const StepShape& shape);  // run_step's forward pass, to the logits
  Status run_graph(const StepShape& shape);
  void clear_graphs();
  // Validates the batch, uploads its step metadata (one copy from pinned memory), sizes the
  // scratch buffers and launches the step (graph replay for small steps); no host sync. With
  // greedy, the step also takes each logit row's argmax (greedy_out_), in the same graph.
  Status launch(const ForwardBatch& batch, bool greedy = false);
  Status launch_step(const ForwardBatch& batch, bool greedy);

  ModelConfig config_;
  std::unique_ptr<DeviceContext> ctx_;
  cuda::GemmBf16 gemm_;
  DeviceSampler sampler_;
  PinnedBuffer meta_staging_;  // host side of meta_
  DeviceBuffer greedy_out_;    // int32 [rows]: a greedy step's ids
  DeviceBuffer greedy_state_;  // the split argmax's meeting slots (zero between steps)
  std::size_t weight_bytes_ = 0;
  bool quantized_ = false;
  int rotary_dim_ = 0;
  float attention_factor_ = 1.0f;

  DeviceLinear embed_;    // [vocab, hidden]
  DeviceLinear lm_head_;  // [vocab, hidden]; unused (embed_ serves) when tied
  DeviceBuffer final_norm_;
  DeviceBuffer inv_freq_;  // f32 [rotary_dim / 2]
  std::vector<DeviceLayer> layers_;

  bool compiled_decode_ = true;
  int upload_threads_ = 0;
  int gate_up_block_ = 0;  // CudaLoadOptions::gate_up_block
  // HEARTH_AFFINE_GEMV at load: kAuto (the tensor-core kernel where it applies, fused decode
  // steps) or kRegister (the HFMA2 kernel, unfused decode steps: the A/B baseline).
  cuda::AffineGemvKernel affine_kernel_ = cuda::AffineGemvKernel::kAuto;
  bool tiled_weights_ = true;  // HEARTH_AFFINE_LAYOUT: relay decode GEMV weights (tile_for_decode)
  int tiled_projections_ = 0;  // relaid by tile_for_decode
  std::future<void> host_release_;
  int64_t steps_ = 0;     // forward_sample calls (the first one is timed at debug level)
  double launch_ms_ = 0;  // host time of the last launch()
  using GraphKey = std::tuple<int, int, int, int, int, int, bool, std::size_t, bool>;
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t last_used = 0;
  };
  std::map<GraphKey, Graph> graphs_;  // at most CudaLoadOptions::kMaxGraphs
  std::map<GraphKey, int> seen_;      // large decode shapes run eagerly so far (bounded)
  uint64_t graph_clock_ = 0;
  std::unique_ptr<StepClock> clock_ = StepClock::from_env();  // HEARTH_STEP_CLOCK=1 only
  std::size_t max_dequant_bytes_ = 0;   // largest quantized layer projection (bf16 bytes)
  std::size_t head_dequant_bytes_ = 0;  // the quantized logits projection (bf16 bytes)
  std::vector<int> order_;              // step scratch: sequences in token order

  int num_blocks_ = 0;
  int block_size_ = 0;
  std::vector<DeviceBuffer> k_cache_;  // per layer bf16 [num_blocks * block_size, kv_heads, hd]
  std::vector<DeviceBuffer> v_cache_;

  // Per-step scratch, grown on demand.
  DeviceBuffer meta_, resid_, xn_, qkv_, q_, attn_, delta_, gate_up_, act_, last_, logits_,
      attn_ws_, dequant_;
};

Status CudaLlamaModel::load(const LlamaWeights& w, std::size_t total_bytes, bool progress) {
  const ModelConfig& c = config_;
  Uploader up(*ctx_, total_bytes, progress, upload_threads_);
  Linear embed{w.embed, {}};
  HEARTH_ASSIGN_OR_RETURN(embed_, up.linear({&embed}, "model.embed_tokens"));
  if (!c.tie_word_embeddings) {
    Linear head{w.lm_head, {}};
    HEARTH_ASSIGN_OR_RETURN(lm_head_, up.linear({&head}, "lm_head"));
  }
  HEARTH_ASSIGN_OR_RETURN(final_norm_, up.vector(w.final_norm, "model.norm"));
  for (int l = 0; l < c.num_layers; ++l) {
    const LlamaLayer& src = w.layers[l];
    const std::string p = fmt::format("model.layers.{}", l);
    DeviceLayer d;
    HEARTH_ASSIGN_OR_RETURN(d.input_norm, up.vector(src.input_norm, p + ".input_layernorm"));
    HEARTH_ASSIGN_OR_RETURN(d.post_norm, up.vector(src.post_norm, p + ".post_attention_layernorm"));
    if (c.qk_norm) {
      HEARTH_ASSIGN_OR_RETURN(d.q_norm, up.vector(src.q_norm, p + ".self_attn.q_norm"));
      HEARTH_ASSIGN_OR_RETURN(d.k_norm, up.vector(src.k_norm, p + ".self_attn.k_norm"));
    }
    HEARTH_ASSIGN_OR_RETURN(d.qkv, up.linear({&src.q, &src.k, &src.v}, p + ".self_attn.qkv"));
    HEARTH_ASSIGN_OR_RETURN(d.o, up.linear({&src.o}, p + ".self_attn.o_proj"));
    HEARTH_ASSIGN_OR_RETURN(d.gate_up,
                            up.linear({&src.gate, &src.up}, p + ".mlp.gate_up", gate_up_block_));
    HEARTH_ASSIGN_OR_RETURN(d.down, up.linear({&src.down}, p + ".mlp.down_proj"));
    quantized_ = quantized_ || d.qkv.quantized();
    for (const DeviceLinear* l : {&d.qkv, &d.o, &d.gate_up, &d.down}) {
      if (l->quantized())
        max_dequant_bytes_ = std::max(max_dequant_bytes_, std::size_t(l->n) * l->k * 2);
    }
    layers_.push_back(std::move(d));
  }
  const DeviceLinear& head = c.tie_word_embeddings ? embed_ : lm_head_;
  if (head.quantized()) head_dequant_bytes_ = std::size_t(head.n) * head.k * 2;
  RopeTables rope = rope_tables(c);
  rotary_dim_ = static_cast<int>(rope.inv_freq.size()) * 2;
  attention_factor_ = rope.attention_factor;
  HEARTH_ASSIGN_OR_RETURN(inv_freq_, ctx_->allocate(rope.inv_freq.size() * 4, "rope frequencies"));
  std::vector<uint16_t> freq_bits(rope.inv_freq.size() * 2);
  std::memcpy(freq_bits.data(), rope.inv_freq.data(), rope.inv_freq.size() * 4);
  HEARTH_RETURN_IF_ERROR(up.copy_owned(inv_freq_.data(), std::move(freq_bits), "rope frequencies"));
  HEARTH_RETURN_IF_ERROR(up.finish());
  HEARTH_RETURN_IF_ERROR(tile_for_decode());
  weight_bytes_ = ctx_->used();
  return ok_status();
}

// Row counts CudaLlamaModel::warm_up runs each GEMM shape at (max_rows >= 1), ascending:
// every count to 16, then four a doubling (m * 2^(1/4), rounded up), and max_rows itself.
std::vector<int> gemm_warm_rows(int max_rows) {
  std::vector<int> rows;
  for (int m = 1; m <= std::min(16, max_rows); ++m) rows.push_back(m);
  for (double m = 16 * 1.189207115; m < max_rows; m *= 1.189207115) {
    const int r = static_cast<int>(std::ceil(m));
    if (r > rows.back()) rows.push_back(r);
  }
  if (rows.back() < max_rows) rows.push_back(max_rows);
  return rows;
}

Status CudaLlamaModel::warm_up(int max_tokens, int max_rows) {
  // cuBLASLt picks its kernel by row count, and CUDA loads a kernel on its first launch:
  // 2.5-4.5 ms of host time a weight shape at a row count not met before, on the engine
  // thread, ahead of that step's launches (S25-R6; a heuristic query alone is 0.12-0.27 ms).
  // One GEMM per weight shape at a ladder of row counts loads the kernels the live steps will
  // pick; their plans stay cached. Zeroed scratch in, results dropped; freed after. Not through
  // linear(): on a quantized weight at m <= kAffineGemvMaxRows that runs the plain affine GEMV,
  // which steps that small never call (they run the fused decode GEMVs) and which refused the
  // 8B's tiled 4-bit weights when a review tried it (S27-U7).
  if (const char* env = std::getenv("HEARTH_GEMM_WARMUP"); env != nullptr && env[0] == '0') {
    return ok_status();
  }
  if (layers_.empty() || max_tokens <= 0) return ok_status();
  Stopwatch watch;
  const DeviceLayer& layer = layers_.front();
  const DeviceLinear& head = config_.tie_word_embeddings ? embed_ : lm_head_;
  struct Target {
    const DeviceLinear* l;
    int max_m;
    bool f32_out;
  };
  // A quantized weight runs the GEMM only past the affine GEMV's rows, on its dequantized
  // bf16 copy; the warm-up gives it a zeroed stand-in of that size (the kernel cuBLASLt picks
  // depends on the shape, not the values), and none when its steps never get past those rows
  // (a quantized 8B's logits at --batch 8 would otherwise take a 1 GB stand-in for nothing).
  std::vector<Target> targets;
  auto add = [&](const DeviceLinear& l, int max_m, bool f32_out) {
    if (!l.quantized() || max_m > cuda::kAffineGemvMaxRows) targets.push_back({&l, max_m, f32_out});
  };
  for (const DeviceLinear* l : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
    add(*l, max_tokens, false);
  }
  add(head, std::max(1, std::min(max_rows, max_tokens)), true);
  if (targets.empty()) return ok_status();
  std::size_t x_bytes = 0, y_bytes = 0, w_bytes = 0;
  for (const Target& t : targets) {
    x_bytes = std::max(x_bytes, std::size_t(t.max_m) * t.l->k * sizeof(Bf16));
    y_bytes = std::max(y_bytes, std::size_t(t.max_m) * t.l->n * (t.f32_out ? 4 : sizeof(Bf16)));
    if (t.l->quantized()) w_bytes = std::max(w_bytes, std::size_t(t.l->n) * t.l->k * sizeof(Bf16));
  }
  HEARTH_ASSIGN_OR_RETURN(DeviceBuffer x, ctx_->allocate(x_bytes, "GEMM warm-up input"));
  HEARTH_ASSIGN_OR_RETURN(DeviceBuffer y, ctx_->allocate(y_bytes, "GEMM warm-up output"));
  DeviceBuffer w;
  cudaStream_t st = ctx_->stream();
  if (w_bytes > 0) {
    HEARTH_ASSIGN_OR_RETURN(w, ctx_->allocate(w_bytes, "GEMM warm-up weight"));
    HEARTH_RETURN_IF_ERROR(
        cuda_status(cudaMemsetAsync(w.data(), 0, w_bytes, st), "zeroing the warm-up weight"));
  }
  HEARTH_RETURN_IF_ERROR(
      cuda_status(cudaMemsetAsync(x.data(), 0, x_bytes, st), "zeroing the warm-up input"));
  int calls = 0;
  for (const Target& t : targets) {
    const bool quantized = t.l->quantized();
    const Bf16* weight = quantized ? w.as<Bf16>() : t.l->w.as<Bf16>();
    for (int m : gemm_warm_rows(t.max_m)) {
      if (quantized && m <= cuda::kAffineGemvMaxRows) continue;
      HEARTH_RETURN_IF_ERROR(gemm_.run(t.l->gemm(m, t.f32_out), x.as<Bf16>(), weight, y.data()));
      ++calls;
    }
  }
  HEARTH_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(st), "GEMM warm-up"));
  spdlog::info(
      "GEMM warm-up: {} shapes and row counts in {:.0f} ms (HEARTH_GEMM_WARMUP=0 skips it)", calls,
      watch.elapsed_ms());
  return ok_status();
}

Status CudaLlamaModel::tile_for_decode() {
  if (!quantized_ || !tiled_weights_ || affine_kernel_ == cuda::AffineGemvKernel::kRegister) {
    return ok_status();
  }
  const ModelConfig& c = config_;
  // fused_decode reads the activation buffers' addresses: one token's worth now.
  const std::size_t hidden = static_cast<std::size_t>(c.hidden_size);
  HEARTH_RETURN_IF_ERROR(ensure(resid_, hidden * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(
      ensure(qkv_, static_cast<std::size_t>(c.q_dim() + 2 * c.kv_dim()) * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(attn_, static_cast<std::size_t>(c.q_dim()) * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(
      ensure(act_, static_cast<std::size_t>(c.intermediate_size) * 2, "activations"));
  if (!fused_decode(1)) return ok_status();
  // The qkv GEMV's fused step takes the RoPE + KV write epilogue under these conditions
  // (affine_gemv_supported's, besides the step's pointers); its tiles then hold RoPE pairs.
  const bool rope = !c.qk_norm && rotary_dim_ == c.head_dim;
  using L = cuda::AffineLayout;
  const L qkv_layout = rope ? L::kTiledRope : L::kTiledPlain;
  for (const DeviceLayer& l : layers_) {
    if (!cuda::affine_tiling_supported(l.qkv.q, qkv_layout, c.head_dim) ||
        !cuda::affine_tiling_supported(l.o.q, L::kTiledPlain, 0) ||
        !cuda::affine_tiling_supported(l.gate_up.q, L::kTiledGated, 0) ||
        !cuda::affine_tiling_supported(l.down.q, L::kTiledPlain, 0)) {
      return ok_status();  // a mixed-bit model keeps MLX's layout throughout
    }
  }
  Stopwatch watch;
  std::vector<std::tuple<DeviceLinear*, L, int>> jobs;
  for (DeviceLayer& l : layers_) {
    jobs.emplace_back(&l.qkv, qkv_layout, c.head_dim);
    jobs.emplace_back(&l.o, L::kTiledPlain, 0);
    jobs.emplace_back(&l.gate_up, L::kTiledGated, 0);
    jobs.emplace_back(&l.down, L::kTiledPlain, 0);
  }
  // The logits projection, unless it is the (row-major, gathered) embedding table.
  if (!c.tie_word_embeddings && lm_head_.quantized() &&
      cuda::affine_tiling_supported(lm_head_.q, L::kTiledPlain, 0)) {
    jobs.emplace_back(&lm_head_, L::kTiledPlain, 0);
  }
  // A projection is relaid beside its row-major copy, then that copy is freed: the load
  // peaks one projection higher. Where that does not fit the budget, the rest stay row-major
  // (either layout serves every call; tiled is only faster).
  for (const auto& [linear, layout, head_dim] : jobs) {
    Status st = tile(*linear, layout, head_dim);
    if (st.code() == ErrorCode::kOutOfMemory) {
      spdlog::warn("cuda load: {}; the remaining decode GEMV weights stay row-major (slower)",
                   st.to_string());
      break;
    }
    HEARTH_RETURN_IF_ERROR(st);
    ++tiled_projections_;
  }
  spdlog::debug("cuda load: {} of {} decode GEMV weights tiled in {:.0f} ms", tiled_projections_,
                jobs.size(), watch.elapsed_ms());
  return ok_status();
}

Status CudaLlamaModel::tile(DeviceLinear& l, cuda::AffineLayout layout, int head_dim) {
  HEARTH_ASSIGN_OR_RETURN(DeviceBuffer tiled,
                          ctx_->allocate(cuda::affine_tiled_bytes(l.q, layout), "tiled weights"));
  HEARTH_RETURN_IF_ERROR(cuda_status(
      cuda::affine_tile(l.q, layout, head_dim, tiled.data(), ctx_->stream()), "tiling weights"));
  HEARTH_RETURN_IF_ERROR(ctx_->synchronize());  // the row-major copy is read until here
  l.q = cuda::affine_tiled_view(l.q, layout, head_dim, tiled.data());
  l.packed = std::move(tiled);
  l.scales = DeviceBuffer();
  l.biases = DeviceBuffer();
  return ok_status();
}

std::string CudaLlamaModel::describe() const {
  const DeviceLinear& l = layers_.front().qkv;
  std::string weights = l.quantized()
                            ? fmt::format("{}-bit group {} (MLX affine)", l.q.bits, l.q.group_size)
                            : std::string("bf16");
  return fmt::format(
      "cuda {} ({} SMs), bf16 compute / f32 accumulate, weights {} ({:.2f} GB on device), "
      "decode GEMV {}, compiled decode (CUDA graphs) {}, KV bf16 paged{}, device memory used "
      "{:.2f} GB (peak {:.2f}) of {:.2f}",
      ctx_->properties().name, ctx_->properties().multiProcessorCount, weights, weight_bytes_ / 1e9,
      batch_invariant()                                     ? "off (batch-invariant GEMMs)"
      : !l.quantized()                                      ? "hearth bf16"
      : affine_kernel_ == cuda::AffineGemvKernel::kRegister ? "affine (register dequant, unfused)"
      : tiled_projections_ > 0 ? "affine (tensor cores where they apply, fused, tiled weights)"
                               : "affine (tensor cores where they apply, fused)",
      compiled_decode_ ? "on" : "off", batch_invariant() ? ", batch-invariant" : "",
      ctx_->used() / 1e9, ctx_->peak() / 1e9, ctx_->budget() / 1e9);
}

Status CudaLlamaModel::create_kv_cache(int num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return invalid_argument_error("KV cache needs positive blocks and block size, got {} x {}",
                                  num_blocks, block_size);
  }
  HEARTH_RETURN_IF_ERROR(ctx_->make_current());
  clear_graphs();
  k_cache_.clear();
  v_cache_.clear();
  num_blocks_ = 0;
  const std::size_t bytes =
      static_cast<std::size_t>(num_blocks) * block_size * config_.kv_dim() * sizeof(Bf16);
  for (int l = 0; l < config_.num_layers; ++l) {
    HEARTH_ASSIGN_OR_RETURN(DeviceBuffer k, ctx_->allocate(bytes, "KV cache (K)"));
    HEARTH_ASSIGN_OR_RETURN(DeviceBuffer v, ctx_->allocate(bytes, "KV cache (V)"));
    k_cache_.push_back(std::move(k));
    v_cache_.push_back(std::move(v));
  }
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  return ok_status();
}

Status CudaLlamaModel::copy_kv_block(int src, int dst) {
  if (src < 0 || dst < 0 || src >= num_blocks_ || dst >= num_blocks_) {
    return invalid_argument_error("KV block copy {} -> {} outside 0..{}", src, dst, num_blocks_);
  }
  const std::size_t block_bytes =
      static_cast<std::size_t>(block_size_) * config_.kv_dim() * sizeof(Bf16);
  for (int l = 0; l < config_.num_layers; ++l) {
    for (DeviceBuffer* cache : {&k_cache_[l], &v_cache_[l]}) {
      auto* base = static_cast<char*>(cache->data());
      HEARTH_RETURN_IF_ERROR(
          cuda_status(cudaMemcpyAsync(base + dst * block_bytes, base + src * block_bytes,
                                      block_bytes, cudaMemcpyDeviceToDevice, ctx_->stream()),
                      "copying a KV block"));
    }
  }
  return ctx_->synchronize();
}

Status CudaLlamaModel::validate(const ForwardBatch& b) const {
  if (num_blocks_ == 0) return invalid_argument_error("forward before create_kv_cache");
  if (b.tokens.size() > 65535) {
    return invalid_argument_error("{} tokens in one step (at most 65535)", b.tokens.size());
  }
  return validate_forward_batch(b, config_.vocab_size, num_blocks_, block_size_);
}

Status CudaLlamaModel::ensure(DeviceBuffer& buf, std::size_t bytes, const char* what) {
  if (buf.size() >= bytes && buf.data() != nullptr) return ok_status();
  clear_graphs();  // captured graphs hold the old address
  buf = DeviceBuffer();
  HEARTH_ASSIGN_OR_RETURN(buf, ctx_->allocate(bytes + bytes / 4, what));
  return ok_status();
}

Status CudaLlamaModel::linear(const DeviceLinear& l, const Bf16* x, int m, void* y, bool f32_out) {
  cudaStream_t st = ctx_->stream();
  if (!l.quantized()) {
    HEARTH_RETURN_IF_ERROR(gemm_.run(l.gemm(m, f32_out), x, l.w.as<Bf16>(), y));
  } else if (m <= cuda::kAffineGemvMaxRows) {
    cuda::AffineGemvArgs a;
    a.w = l.q;
    a.x = x;
    a.ldx = l.k;
    a.y = y;
    a.ldy = l.n;
    a.y_f32 = f32_out;
    a.m = m;
    a.sm_count = ctx_->properties().multiProcessorCount;
    a.kernel = affine_kernel_;
    HEARTH_RETURN_IF_ERROR(cuda_status(cuda::affine_gemv(a, st), "quantized GEMV"));
  } else {
    // Prefill: dequantize to a bf16 scratch matrix, then the cuBLASLt GEMM.
    HEARTH_RETURN_IF_ERROR(ensure(dequant_, std::size_t(l.n) * l.k * 2, "dequantized weight"));
    HEARTH_RETURN_IF_ERROR(
        cuda_status(cuda::affine_dequantize(l.q, dequant_.as<Bf16>(), l.k, st), "dequantize"));
    HEARTH_RETURN_IF_ERROR(gemm_.run(l.gemm(m, f32_out), x, dequant_.as<Bf16>(), y));
  }
  if (l.bias.data() != nullptr) {
    if (f32_out) return unsupported_error("bias on an f32-output projection");
    HEARTH_RETURN_IF_ERROR(cuda_status(
        cuda::bias_add(static_cast<Bf16*>(y), l.n, l.bias.as<Bf16>(), m, l.n, st), "bias add"));
  }
  return ok_status();
}

cuda::GemvArgs CudaLlamaModel::gemv_args(const DeviceLinear& l, const Bf16* x, int m, void* y,
                                         cuda::GemvEpilogue epi, const DeviceBuffer* norm) const {
  const bool gated = epi == cuda::GemvEpilogue::kGatedSilu;
  cuda::GemvArgs a;
  a.x = x;
  a.ldx = l.k;
  a.w = l.w.as<Bf16>();
  a.ldw = l.k;
  a.bias = l.bias.data() != nullptr ? l.bias.as<Bf16>() : nullptr;
  a.y = y;
  a.n = gated ? l.n / 2 : l.n;
  a.ldy = a.n;
  a.epilogue = epi;
  a.norm_weight = norm != nullptr ? norm->as<Bf16>() : nullptr;
  a.norm_eps = static_cast<float>(config_.rms_norm_eps);
  a.gate_up_block = gated ? l.row_block : 0;
  a.m = m;
  a.k = l.k;
  a.sm_count = ctx_->properties().multiProcessorCount;
  a.pdl = pdl();
  return a;
}

cuda::AffineGemvArgs CudaLlamaModel::affine_args(const DeviceLinear& l, const Bf16* x, int m,
                                                 void* y, cuda::GemvEpilogue epi,
                                                 const DeviceBuffer* norm) const {
  const bool gated =
      epi == cuda::GemvEpilogue::kGatedSilu || epi == cuda::GemvEpilogue::kGatedGeluTanh;
  cuda::AffineGemvArgs a;
  a.w = l.q;  // gated: [2n, k], gate rows then up (row_block 0)
  a.x = x;
  a.ldx = l.k;
  a.y = y;
  a.ldy = gated ? l.n / 2 : l.n;
  a.epilogue = epi;
  a.norm_weight = norm != nullptr ? norm->as<Bf16>() : nullptr;
  a.norm_eps = static_cast<float>(config_.rms_norm_eps);
  a.m = m;
  a.sm_count = ctx_->properties().multiProcessorCount;
  a.pdl = pdl();
  a.kernel = affine_kernel_;
  return a;
}

bool CudaLlamaModel::fused_affine_layer(const DeviceLayer& l, int n) const {
  for (const DeviceLinear* p : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
    if (!p->quantized() || p->bias.data() != nullptr) return false;
  }
  if (l.gate_up.row_block != 0 || l.gate_up.n % 2 != 0) return false;
  using E = cuda::GemvEpilogue;
  return cuda::affine_gemv_supported(
             affine_args(l.qkv, resid_.as<Bf16>(), n, qkv_.data(), E::kStore, &l.input_norm)) &&
         cuda::affine_gemv_supported(
             affine_args(l.o, attn_.as<Bf16>(), n, resid_.data(), E::kResidualAdd, nullptr)) &&
         cuda::affine_gemv_supported(affine_args(l.gate_up, resid_.as<Bf16>(), n, act_.data(),
                                                 E::kGatedSilu, &l.post_norm)) &&
         cuda::affine_gemv_supported(
             affine_args(l.down, act_.as<Bf16>(), n, resid_.data(), E::kResidualAdd, nullptr));
}

bool CudaLlamaModel::fused_decode(int n) const {
  // The fused GEMVs sum in another order than the GEMM: batch-invariant steps never take them.
  if (n < 1 || layers_.empty() || batch_invariant()) return false;
  if (quantized_) {
    // HEARTH_AFFINE_GEMV=register keeps the unfused 9-kernel layer (the A/B baseline). Every
    // layer is checked: quantization may differ between layers (mixed-bit MLX models).
    if (affine_kernel_ == cuda::AffineGemvKernel::kRegister || n > cuda::kAffineGemvMaxRows) {
      return false;
    }
    return std::all_of(layers_.begin(), layers_.end(),
                       [&](const DeviceLayer& l) { return fused_affine_layer(l, n); });
  }
  if (n > cuda::kGemvRoutedMaxRows) return false;
  const DeviceLayer& l = layers_.front();
  if (l.gate_up.n % 2 != 0) return false;
  using E = cuda::GemvEpilogue;
  return cuda::gemv_bf16_supported(
             gemv_args(l.qkv, resid_.as<Bf16>(), n, qkv_.data(), E::kStore, &l.input_norm)) &&
         cuda::gemv_bf16_supported(
             gemv_args(l.o, attn_.as<Bf16>(), n, resid_.data(), E::kResidualAdd, nullptr)) &&
         cuda::gemv_bf16_supported(gemv_args(l.gate_up, resid_.as<Bf16>(), n, act_.data(),
                                             E::kGatedSilu, &l.post_norm)) &&
         cuda::gemv_bf16_supported(
             gemv_args(l.down, act_.as<Bf16>(), n, resid_.data(), E::kResidualAdd, nullptr));
}

Status CudaLlamaModel::embed(const int32_t* ids, int n, Bf16* out) {
  const int hidden = config_.hidden_size;
  if (embed_.quantized()) {
    return cuda_status(
        cuda::affine_embedding_gather(embed_.q, ids, n, 1.0f, out, hidden, ctx_->stream()),
        "embedding");
  }
  return cuda_status(cuda::embedding_gather(embed_.w.as<Bf16>(), hidden, ids, n, hidden,
                                            config_.vocab_size, 1.0f, out, hidden, ctx_->stream()),
                     "embedding");
}

Status CudaLlamaModel::run_step(const StepShape& shape) {
  HEARTH_RETURN_IF_ERROR(run_forward(shape));
  if (!shape.greedy || shape.rows == 0) return ok_status();
  // The split argmax under PDL: it launches while the logits GEMV drains (the same kernel
  // DeviceSampler runs for greedy rows, so the same ids).
  cuda::SamplingArgs a;
  a.logits = logits_.as<float>();
  a.ld_logits = config_.vocab_size;
  a.rows = shape.rows;
  a.vocab = config_.vocab_size;
  a.out_tokens = greedy_out_.as<int32_t>();
  a.all_greedy = true;
  a.greedy_state = greedy_state_.data();
  a.pdl = pdl();
  return cuda_status(cuda::sample_tokens(a, ctx_->stream()), "greedy sampling");
}

Status CudaLlamaModel::run_forward(const StepShape& shape) {
  const ModelConfig& c = config_;
  cudaStream_t st = ctx_->stream();
  const int n = shape.n;
  const int rows = shape.rows;
  const int hidden = c.hidden_size;
  const int qkv_dim = c.q_dim() + 2 * c.kv_dim();
  const int inter = c.intermediate_size;
  const int num_seqs = shape.num_seqs;
  const int max_blocks = shape.ld_table;
  const int splits = shape.splits;
  const std::size_t off_pos = shape.off_pos, off_slots = shape.off_slots, off_qs = shape.off_qs,
                    off_kv = shape.off_kv, off_tables = shape.off_tables, off_rows = shape.off_rows;
  auto meta = [&](std::size_t offset) { return static_cast<char*>(meta_.data()) + offset; };
  const auto* d_tokens = reinterpret_cast<const int32_t*>(meta(shape.off_tokens));
  const float* d_freq = c.rope.type == RopeType::kDynamic
                            ? reinterpret_cast<const float*>(meta(shape.off_freq))
                            : inv_freq_.as<float>();
  auto* resid = resid_.as<Bf16>();  // [n, hidden] the residual stream
  auto* xn = xn_.as<Bf16>();        // [n, hidden] normalized input of a sublayer
  auto* delta = delta_.as<Bf16>();  // [n, hidden] a sublayer's output
  HEARTH_RETURN_IF_ERROR(embed(d_tokens, n, resid));
  // Decode steps fuse the norms into the qkv / gate_up GEMVs' prologues and the residual
  // adds and SiLU gate into the GEMV epilogues (5-6 kernels a layer instead of 9, rounded as
  // the unfused kernels round; wide GEMVs split rows over two warps, which only reorders f32
  // sums); the residual then needs no pending delta. Dense weights run gemv_bf16, quantized
  // ones affine_gemv (the tensor-core kernel where it applies).
  const bool fused = fused_decode(n);
  // The small kernels between GEMMs (norms, RoPE + KV write, the SiLU gate) launch as
  // programmatic dependents too: scheduled as the previous kernel's blocks exit.
  const bool use_pdl = pdl();
  using Epi = cuda::GemvEpilogue;
  auto gemv = [&](const DeviceLinear& l, const Bf16* x, void* y, Epi epi,
                  const DeviceBuffer* norm) {
    if (l.quantized()) {
      return cuda_status(cuda::affine_gemv(affine_args(l, x, n, y, epi, norm), st),
                         "fused affine GEMV");
    }
    return cuda_status(cuda::gemv_bf16(gemv_args(l, x, n, y, epi, norm), st), "fused GEMV");
  };

  for (int l = 0; l < c.num_layers; ++l) {
    DeviceLayer& layer = layers_[l];
    // Attention block: resid += o_proj(attention(rope(q), rope(k), v)).
    cuda::RopeKvWriteArgs r;
    r.qkv = qkv_.as<Bf16>();
    r.ld_qkv = qkv_dim;
    r.positions = reinterpret_cast<const int32_t*>(meta(off_pos));
    r.slots = reinterpret_cast<const int64_t*>(meta(off_slots));
    r.inv_freq = d_freq;
    r.attention_scaling = attention_factor_;
    r.q_norm = c.qk_norm ? layer.q_norm.as<Bf16>() : nullptr;
    r.k_norm = c.qk_norm ? layer.k_norm.as<Bf16>() : nullptr;
    r.norm_eps = c.rms_norm_eps;
    r.q_out = q_.as<Bf16>();
    r.ld_q_out = c.q_dim();
    r.k_cache = k_cache_[l].as<Bf16>();
    r.v_cache = v_cache_[l].as<Bf16>();
    r.tokens = n;
    r.q_heads = c.num_heads;
    r.kv_heads = c.num_kv_heads;
    r.head_dim = c.head_dim;
    r.rotary_dim = rotary_dim_;
    r.pdl = use_pdl;
    bool roped = false;  // the qkv GEMV's epilogue did rope_kv_write's work
    if (fused) {
      // No L2 prefetch of o's weights from the qkv GEMV: W4's lab_decode_step measured the
      // 8B step at 4.340 ms with it and 4.267 ms without (graph replay, same run). RoPE and
      // the KV write ride in the GEMV's epilogue where supported (no q/k norm, full rotary
      // dims; quantized: the tensor-core kernel only): one kernel and one launch gap less a
      // layer, the same bits.
      if (layer.qkv.quantized()) {
        cuda::AffineGemvArgs qa =
            affine_args(layer.qkv, resid, n, qkv_.data(), Epi::kStore, &layer.input_norm);
        cuda::AffineGemvArgs qr = qa;
        qr.epilogue = Epi::kRopeKvWrite;
        qr.rope = r;
        roped = cuda::affine_gemv_supported(qr);
        HEARTH_RETURN_IF_ERROR(
            cuda_status(cuda::affine_gemv(roped ? qr : qa, st), "fused affine GEMV"));
      } else {
        cuda::GemvArgs qa =
            gemv_args(layer.qkv, resid, n, qkv_.data(), Epi::kStore, &layer.input_norm);
        cuda::GemvArgs qr = qa;
        qr.epilogue = Epi::kRopeKvWrite;
        qr.rope = r;
        roped = cuda::gemv_bf16_supported(qr);
        HEARTH_RETURN_IF_ERROR(cuda_status(cuda::gemv_bf16(roped ? qr : qa, st), "fused GEMV"));
      }
    } else {
      HEARTH_RETURN_IF_ERROR(
          cuda_status(cuda::rmsnorm_residual(l == 0 ? nullptr : delta, hidden, resid, hidden,
                                             layer.input_norm.as<Bf16>(), 0.0f, c.rms_norm_eps, xn,
                                             hidden, n, hidden, st, use_pdl),
                      "input norm"));
      HEARTH_RETURN_IF_ERROR(linear(layer.qkv, xn, n, qkv_.data(), false));
    }
    if (!roped) {
      HEARTH_RETURN_IF_ERROR(cuda_status(cuda::rope_kv_write(r, st), "rope + KV write"));
    }
    cuda::PagedAttentionArgs a;
    a.q = q_.as<Bf16>();
    a.ld_q = c.q_dim();
    a.k_cache = k_cache_[l].as<Bf16>();
    a.v_cache = v_cache_[l].as<Bf16>();
    a.block_tables = reinterpret_cast<const int32_t*>(meta(off_tables));
    a.ld_block_tables = max_blocks;
    a.query_start = reinterpret_cast<const int32_t*>(meta(off_qs));
    a.kv_lens = reinterpret_cast<const int32_t*>(meta(off_kv));
    a.out = attn_.as<Bf16>();
    a.ld_out = c.q_dim();
    a.seqs = num_seqs;
    a.tokens = n;
    a.q_heads = c.num_heads;
    a.kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.block_size = block_size_;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.sliding_window = c.sliding_window && c.layer_uses_window[l] ? *c.sliding_window : 0;
    a.num_splits = splits;
    a.split_keys = shape.split_keys;
    a.workspace = attn_ws_.as<float>();
    // PDL: the sequence lookup and first block-table entries load before the wait on the
    // previous kernel (rope_kv_write or the fused qkv GEMV); in fused decode steps the o GEMV
    // (PDL too) starts streaming its weights while attention runs.
    a.pdl = use_pdl;
    a.batch_invariant = batch_invariant();
    HEARTH_RETURN_IF_ERROR(cuda_status(cuda::paged_attention(a, st), "paged attention"));
    if (fused) {
      // o (+ residual), then the MLP block below in two kernels.
      HEARTH_RETURN_IF_ERROR(gemv(layer.o, attn_.as<Bf16>(), resid, Epi::kResidualAdd, nullptr));
      HEARTH_RETURN_IF_ERROR(
          gemv(layer.gate_up, resid, act_.data(), Epi::kGatedSilu, &layer.post_norm));
      HEARTH_RETURN_IF_ERROR(gemv(layer.down, act_.as<Bf16>(), resid, Epi::kResidualAdd, nullptr));
      continue;
    }
    HEARTH_RETURN_IF_ERROR(linear(layer.o, attn_.as<Bf16>(), n, delta, false));

    // MLP block: resid += down(silu(gate(x)) * up(x)).
    HEARTH_RETURN_IF_ERROR(cuda_status(
        cuda::rmsnorm_residual(delta, hidden, resid, hidden, layer.post_norm.as<Bf16>(), 0.0f,
                               c.rms_norm_eps, xn, hidden, n, hidden, st, use_pdl),
        "post-attention norm"));
    HEARTH_RETURN_IF_ERROR(linear(layer.gate_up, xn, n, gate_up_.data(), false));
    const int gb = layer.gate_up.row_block;
    if (gb == 0) {
      HEARTH_RETURN_IF_ERROR(
          cuda_status(cuda::gated_activation(cuda::GatedActivation::kSilu, gate_up_.as<Bf16>(),
                                             2 * inter, gate_up_.as<Bf16>() + inter, 2 * inter,
                                             act_.as<Bf16>(), inter, n, inter, st, use_pdl),
                      "SiLU gate"));
    } else {
      // Blocked gate_up: each token's row is inter / gb rows of [gb gate | gb up] columns;
      // gated_activation takes at most 65535 rows a launch.
      const int per_token = inter / gb;
      const int chunk = std::max(1, 65535 / per_token);
      for (int r0 = 0; r0 < n; r0 += chunk) {
        const int rows = std::min(chunk, n - r0);
        const Bf16* g = gate_up_.as<Bf16>() + std::size_t(r0) * 2 * inter;
        HEARTH_RETURN_IF_ERROR(
            cuda_status(cuda::gated_activation(cuda::GatedActivation::kSilu, g, 2 * gb, g + gb,
                                               2 * gb, act_.as<Bf16>() + std::size_t(r0) * inter,
                                               gb, rows * per_token, gb, st, use_pdl),
                        "SiLU gate"));
      }
    }
    HEARTH_RETURN_IF_ERROR(linear(layer.down, act_.as<Bf16>(), n, delta, false));
  }
  if (rows == 0) return ok_status();

  const DeviceLinear& head = c.tie_word_embeddings ? embed_ : lm_head_;
  if (fused && shape.all_rows && head.quantized() && head.bias.data() == nullptr) {
    // Every token's logits, in order (decode): the head's GEMV normalizes the residual
    // stream in its prologue (the final norm's bits) and starts under PDL; no norm kernel,
    // no gather.
    cuda::AffineGemvArgs a = affine_args(head, resid, n, logits_.data(), Epi::kStore, &final_norm_);
    a.y_f32 = true;
    if (cuda::affine_gemv_supported(a)) {
      return cuda_status(cuda::affine_gemv(a, st), "logits GEMV");
    }
  }
  // Final norm over every row (cheap), then gather the rows whose logits are wanted.
  HEARTH_RETURN_IF_ERROR(cuda_status(
      cuda::rmsnorm_residual(fused ? nullptr : delta, hidden, resid, hidden, final_norm_.as<Bf16>(),
                             0.0f, c.rms_norm_eps, xn, hidden, n, hidden, st, use_pdl),
      "final norm"));
  HEARTH_RETURN_IF_ERROR(cuda_status(
      cuda::embedding_gather(xn, hidden, reinterpret_cast<const int32_t*>(meta(off_rows)), rows,
                             hidden, n, 1.0f, last_.as<Bf16>(), hidden, st),
      "gathering logit rows"));
  HEARTH_RETURN_IF_ERROR(linear(head, last_.as<Bf16>(), rows, logits_.data(), true));
  return ok_status();
}

Status CudaLlamaModel::run_graph(const StepShape& shape) {
  cudaStream_t st = ctx_->stream();
  auto it = graphs_.find(shape.key());
  if (it == graphs_.end()) {
    if (graphs_.size() >= static_cast<std::size_t>(CudaLoadOptions::kMaxGraphs)) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
        return a.second.last_used < b.second.last_used;
      });
      cudaGraphExecDestroy(lru->second.exec);
      graphs_.erase(lru);
    }
    HEARTH_RETURN_IF_ERROR(cuda_status(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal),
                                       "capturing a decode step"));
    Status captured = run_step(shape);
    cudaGraph_t graph = nullptr;
    cudaError_t end = cudaStreamEndCapture(st, &graph);
    if (!captured.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return captured;
    }
    HEARTH_RETURN_IF_ERROR(cuda_status(end, "ending the decode-step capture"));
    cudaGraphExec_t exec = nullptr;
    cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    HEARTH_RETURN_IF_ERROR(cuda_status(inst, "instantiating the decode-step graph"));
    it = graphs_.emplace(shape.key(), Graph{exec, 0}).first;
  }
  it->second.last_used = ++graph_clock_;
  return cuda_status(cudaGraphLaunch(it->second.exec, st), "replaying the decode-step graph");
}

void CudaLlamaModel::clear_graphs() {
  for (auto& [key, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
  graphs_.clear();
}

// Where each array of a step's metadata sits in the one image uploaded per step (16-byte
// aligned); `bytes` is the image's size.
struct MetaLayout {
  std::size_t tokens, pos, slots, qs, kv, tables, rows, freq, bytes;
};

MetaLayout meta_layout(int n, int num_seqs, int ld_table, int rows, std::size_t freq_floats) {
  MetaLayout m{};
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at = (at + bytes + 15) / 16 * 16;
    return offset;
  };
  m.tokens = take(std::size_t(n) * 4);
  m.pos = take(std::size_t(n) * 4);
  m.slots = take(std::size_t(n) * 8);
  m.qs = take((std::size_t(num_seqs) + 1) * 4);
  m.kv = take(std::size_t(num_seqs) * 4);
  m.tables = take(std::size_t(num_seqs) * ld_table * 4);
  m.rows = take(std::size_t(rows) * 4);
  m.freq = freq_floats > 0 ? take(freq_floats * 4) : 0;
  m.bytes = std::max<std::size_t>(at, 16);
  return m;
}

Status CudaLlamaModel::launch(const ForwardBatch& batch, bool greedy) {
  Stopwatch watch;
  Status launched = launch_step(batch, greedy);
  launch_ms_ = watch.elapsed_ms();
  return launched;
}

Status CudaLlamaModel::launch_step(const ForwardBatch& batch, bool greedy) {
  HEARTH_RETURN_IF_ERROR(validate(batch));
  HEARTH_RETURN_IF_ERROR(ctx_->make_current());  // the engine steps on its own thread
  const ModelConfig& c = config_;
  cudaStream_t st = ctx_->stream();
  const int n = static_cast<int>(batch.tokens.size());
  const int rows = static_cast<int>(batch.logit_rows.size());
  const int hidden = c.hidden_size;
  const int qkv_dim = c.q_dim() + 2 * c.kv_dim();
  const int inter = c.intermediate_size;

  // Step metadata, sequences in token order (the attention kernel expects query_start to
  // partition the tokens in order; the engine already lists them so).
  const int num_seqs = static_cast<int>(batch.sequences.size());
  order_.resize(num_seqs);
  std::iota(order_.begin(), order_.end(), 0);
  auto first_token = [&](int i) { return batch.sequences[i].first_token; };
  if (!std::is_sorted(order_.begin(), order_.end(),
                      [&](int a, int b) { return first_token(a) < first_token(b); })) {
    std::sort(order_.begin(), order_.end(),
              [&](int a, int b) { return first_token(a) < first_token(b); });
  }
  int max_blocks = 1;
  int max_kv = 0;
  for (const SequenceSlice& s : batch.sequences) {
    max_blocks =
        std::max(max_blocks, (s.num_cached + s.num_tokens + block_size_ - 1) / block_size_);
    max_kv = std::max(max_kv, s.num_cached + s.num_tokens);
  }
  // The table stride is padded to a power of two so that a growing context keeps the same
  // kernel arguments (and the same captured graph) for many steps.
  int ld_table = 8;
  while (ld_table < max_blocks) ld_table *= 2;
  std::vector<float> dynamic_freq;
  if (c.rope.type == RopeType::kDynamic) {  // rescaled by the longest sequence, per step
    dynamic_freq = rope_tables(c, max_kv).inv_freq;
  }
  const MetaLayout m = meta_layout(n, num_seqs, ld_table, rows, dynamic_freq.size());
  HEARTH_RETURN_IF_ERROR(ensure(meta_, m.bytes, "step metadata"));
  // The image is written straight into pinned staging, then one true async DMA. The previous
  // step synchronized before returning, so its upload from this buffer is complete.
  HEARTH_RETURN_IF_ERROR(meta_staging_.ensure(m.bytes));
  char* image = meta_staging_.data();
  std::memcpy(image + m.tokens, batch.tokens.data(), std::size_t(n) * 4);
  std::memcpy(image + m.pos, batch.positions.data(), std::size_t(n) * 4);
  if (rows > 0) std::memcpy(image + m.rows, batch.logit_rows.data(), std::size_t(rows) * 4);
  if (!dynamic_freq.empty()) {
    std::memcpy(image + m.freq, dynamic_freq.data(), dynamic_freq.size() * 4);
  }
  auto* slots = reinterpret_cast<int64_t*>(image + m.slots);
  auto* query_start = reinterpret_cast<int32_t*>(image + m.qs);
  auto* kv_lens = reinterpret_cast<int32_t*>(image + m.kv);
  auto* tables = reinterpret_cast<int32_t*>(image + m.tables);
  for (int i = 0; i < num_seqs; ++i) {
    const SequenceSlice& s = batch.sequences[order_[i]];
    query_start[i] = s.first_token;
    kv_lens[i] = s.num_cached + s.num_tokens;
    const int blocks = (kv_lens[i] + block_size_ - 1) / block_size_;
    int32_t* row = tables + std::size_t(i) * ld_table;
    std::copy_n(s.block_table.begin(), blocks, row);
    std::fill(row + blocks, row + ld_table, 0);
    for (int t = 0; t < s.num_tokens; ++t) {
      const int logical = s.num_cached + t;
      slots[s.first_token + t] =
          static_cast<int64_t>(s.block_table[logical / block_size_]) * block_size_ +
          logical % block_size_;
    }
  }
  query_start[num_seqs] = n;
  HEARTH_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(meta_.data(), meta_staging_.data(), m.bytes, cudaMemcpyHostToDevice, st),
      "uploading step metadata"));
  // Batch-invariant: each query's keys in splits of a fixed size, merged in order (a split
  // count set by the batch would change the sums' order; see paged_attention_invariant_splits).
  int split_keys = 0;
  const int splits = batch_invariant()
                         ? cuda::paged_attention_invariant_splits(max_kv, &split_keys)
                         : cuda::paged_attention_num_splits(n, c.num_heads, c.num_kv_heads, max_kv,
                                                            ctx_->properties().multiProcessorCount);
  // The GEMMs' operands hold the rows the GEMM reads and writes (past n: scratch, under the
  // batch-invariant block forms).
  const auto padded = [&](int r) -> std::size_t {
    return static_cast<std::size_t>(gemm_.operand_rows(r));
  };
  const std::size_t np = padded(n);
  const std::size_t rp = padded(std::max(rows, 1));
  HEARTH_RETURN_IF_ERROR(ensure(resid_, np * hidden * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(xn_, np * hidden * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(qkv_, np * qkv_dim * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(q_, np * c.q_dim() * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(attn_, np * c.q_dim() * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(delta_, np * hidden * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(gate_up_, np * 2 * inter * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(act_, np * inter * 2, "activations"));
  HEARTH_RETURN_IF_ERROR(ensure(last_, rp * hidden * 2, "logit rows"));
  HEARTH_RETURN_IF_ERROR(ensure(logits_, rp * c.vocab_size * 4, "logits"));
  HEARTH_RETURN_IF_ERROR(ensure(
      attn_ws_, cuda::paged_attention_workspace_bytes(n, c.num_heads, c.head_dim, splits) + 16,
      "attention workspace"));
  // Quantized projections of more than the GEMV's rows are dequantized into one scratch
  // matrix; it is sized here, before any capture (a capture may not allocate).
  std::size_t dequant_bytes = n > cuda::kAffineGemvMaxRows ? max_dequant_bytes_ : 0;
  if (rows > cuda::kAffineGemvMaxRows) dequant_bytes = std::max(dequant_bytes, head_dequant_bytes_);
  if (dequant_bytes > 0) {
    HEARTH_RETURN_IF_ERROR(ensure(dequant_, dequant_bytes, "dequantized weight"));
  }

  bool all_rows = rows == n;
  for (int i = 0; all_rows && i < rows; ++i) all_rows = batch.logit_rows[i] == i;
  if (greedy) {  // sized before any capture (a capture may not allocate)
    const std::size_t state_bytes = cuda::greedy_workspace_bytes(rows);
    const bool fresh = greedy_state_.data() == nullptr || greedy_state_.size() < state_bytes;
    HEARTH_RETURN_IF_ERROR(ensure(greedy_state_, state_bytes, "greedy sampling slots"));
    if (fresh) {
      HEARTH_RETURN_IF_ERROR(cuda_status(
          cudaMemsetAsync(greedy_state_.data(), 0, greedy_state_.size(), ctx_->stream()),
          "zeroing the greedy sampling slots"));
    }
    HEARTH_RETURN_IF_ERROR(ensure(greedy_out_, std::size_t(rows) * 4, "sampled ids"));
  }
  const StepShape shape{n,     num_seqs, ld_table, splits, split_keys, rows,   all_rows, m.tokens,
                        m.pos, m.slots,  m.qs,     m.kv,   m.tables,   m.rows, m.freq,   greedy};
  if (rows == 0 || !compiled_decode_) return run_step(shape);
  // Small steps and decode-only steps (one token per sequence, e.g. a busy engine's batch)
  // are captured once their shape repeats, so a one-off shape (a short prompt's prefill)
  // never pays for a capture.
  const bool graphable = n <= CudaLoadOptions::kMaxGraphTokens ||
                         (num_seqs == n && n <= CudaLoadOptions::kMaxGraphRows);
  if (graphable) {
    if (graphs_.contains(shape.key())) return run_graph(shape);
    if (seen_.size() >= 4 * static_cast<std::size_t>(CudaLoadOptions::kMaxGraphs)) seen_.clear();
    if (++seen_[shape.key()] >= 2) {
      seen_.erase(shape.key());
      return run_graph(shape);
    }
  }
  return run_step(shape);
}

Status CudaLlamaModel::forward(const ForwardBatch& batch, std::span<float> logits) {
  if (logits.size() != batch.logit_rows.size() * static_cast<std::size_t>(config_.vocab_size)) {
    return invalid_argument_error("logits span of {} floats, need {} x {}", logits.size(),
                                  batch.logit_rows.size(), config_.vocab_size);
  }
  if (clock_ != nullptr) HEARTH_RETURN_IF_ERROR(clock_->begin(ctx_->stream(), false));
  HEARTH_RETURN_IF_ERROR(launch(batch));
  if (batch.logit_rows.empty()) return ctx_->synchronize();
  cudaStream_t st = ctx_->stream();
  HEARTH_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(logits.data(), logits_.data(), logits.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, st),
                  "downloading logits"));
  return ctx_->synchronize();
}

Status CudaLlamaModel::forward_sample(const ForwardBatch& batch, std::span<const RowSampling> rows,
                                      std::span<int32_t> tokens, std::span<float> host_logits) {
  if (rows.size() != batch.logit_rows.size() || tokens.size() != rows.size()) {
    return invalid_argument_error("{} sampling rows and {} token slots for {} logit rows",
                                  rows.size(), tokens.size(), batch.logit_rows.size());
  }
  const std::size_t vocab = static_cast<std::size_t>(config_.vocab_size);
  const auto host_rows = static_cast<std::size_t>(
      std::count_if(rows.begin(), rows.end(), [](const RowSampling& r) { return r.on_host; }));
  if (host_logits.size() != host_rows * vocab) {
    return invalid_argument_error("host logits span of {} floats, need {} x {}", host_logits.size(),
                                  host_rows, vocab);
  }
  Stopwatch watch;
  if (clock_ != nullptr) {
    HEARTH_RETURN_IF_ERROR(
        clock_->begin(ctx_->stream(), !rows.empty() && batch.tokens.size() == rows.size() &&
                                          rows.size() == batch.sequences.size()));
  }
  // Plain greedy rows: the argmax runs at the end of the step itself (captured with it),
  // and only the ids come back.
  const bool greedy = DeviceSampler::plain_greedy(rows);
  HEARTH_RETURN_IF_ERROR(launch(batch, greedy));
  if (clock_ != nullptr) HEARTH_RETURN_IF_ERROR(clock_->forward_done(ctx_->stream()));
  if (rows.empty()) return ctx_->synchronize();
  if (steps_ == 0) {  // the first step pays for lazy kernel loading and first allocations
    HEARTH_RETURN_IF_ERROR(ctx_->synchronize());
    spdlog::debug("cuda model: first step ({} tokens) launched in {:.1f} ms, computed at {:.1f} ms",
                  batch.tokens.size(), launch_ms_, watch.elapsed_ms());
  }
  ++steps_;
  cudaEvent_t downloaded = clock_ != nullptr ? clock_->end_event() : nullptr;
  if (greedy) {  // the step took the argmax: only its ids come back
    HEARTH_RETURN_IF_ERROR(sampler_.download(greedy_out_.as<int32_t>(), tokens, downloaded));
  } else {
    // Host rows leave before the sampling kernels touch the logits (same stream, in order).
    std::size_t out = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!rows[i].on_host) continue;
      HEARTH_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(host_logits.data() + out * vocab, logits_.as<float>() + i * vocab,
                          vocab * sizeof(float), cudaMemcpyDeviceToHost, ctx_->stream()),
          "downloading logits"));
      ++out;
    }
    HEARTH_RETURN_IF_ERROR(
        sampler_.sample(logits_.as<float>(), config_.vocab_size, rows, tokens, downloaded));
  }
  if (clock_ != nullptr) clock_->finish();
  return ok_status();
}

std::optional<DeviceMemoryUsage> CudaLlamaModel::device_memory() const {
  std::size_t free = 0, total = 0;
  // Any thread may ask (the model may have been loaded on another one).
  if (!ctx_->make_current().ok() || cudaMemGetInfo(&free, &total) != cudaSuccess) {
    return std::nullopt;
  }
  DeviceMemoryUsage m;
  m.total_bytes = total;
  m.used_bytes = ctx_->used();
  m.peak_bytes = ctx_->peak();
  const std::size_t budget_left = ctx_->budget() > ctx_->used() ? ctx_->budget() - ctx_->used() : 0;
  m.free_bytes = std::min(free, budget_left);
  return m;
}

}  // namespace

namespace {

// The host bytes of every weight matrix (in the mapped shards, mostly), in upload order.
std::vector<std::pair<const char*, std::size_t>> weight_ranges(const LlamaWeights& w) {
  std::vector<std::pair<const char*, std::size_t>> ranges;
  auto add = [&ranges](const kernels::WeightMatrix& m) {
    const std::size_t elems = static_cast<std::size_t>(m.rows) * m.cols;
    if (!m.quantized()) {
      ranges.emplace_back(static_cast<const char*>(m.data), elems * dtype_size(m.dtype));
      return;
    }
    const std::size_t side = static_cast<std::size_t>(m.rows) * (m.cols / m.group_size);
    ranges.emplace_back(static_cast<const char*>(m.data), elems * m.bits / 8);
    ranges.emplace_back(static_cast<const char*>(m.scales), side * dtype_size(m.scale_dtype));
    ranges.emplace_back(static_cast<const char*>(m.biases), side * dtype_size(m.scale_dtype));
  };
  add(w.embed);
  if (w.lm_head.data != w.embed.data) add(w.lm_head);
  for (const LlamaLayer& l : w.layers) {
    for (const Linear* p : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) add(p->w);
  }
  return ranges;
}

// Touches one byte per page of `ranges` on several threads until done or `stop`: maps the
// page-cache pages of the shards while the CUDA context is being created, so the upload's
// copies find them mapped. (On the H200 VM faulting a warm file in was measured nearly free,
// 3 GiB in 10 ms with large page-cache folios; kernels that map 4 KiB pages pay more.)
class Prefault {
 public:
  Prefault(std::vector<std::pair<const char*, std::size_t>> ranges, int threads)
      : ranges_(std::move(ranges)) {
    for (const auto& [p, n] : ranges_) {
      for (std::size_t off = 0; off < n; off += kPiece)
        pieces_.push_back({p + off, std::min(kPiece, n - off)});
    }
    for (int t = 0; t < threads; ++t) pool_.emplace_back([this] { run(); });
  }
  ~Prefault() { stop(); }
  // Stops the threads (wherever they are) and returns the bytes they touched.
  std::size_t stop() {
    stop_ = true;
    for (std::thread& t : pool_) t.join();
    pool_.clear();
    return touched_;
  }

 private:
  static constexpr std::size_t kPiece = std::size_t{16} << 20;
  void run() {
    for (std::size_t i = next_++; i < pieces_.size() && !stop_; i = next_++) {
      const auto& [p, n] = pieces_[i];
      unsigned sum = 0;
      for (std::size_t off = 0; off < n; off += 4096) {
        sum += static_cast<unsigned>(*reinterpret_cast<const volatile char*>(p + off));
      }
      sink_ += sum;
      touched_ += n;
    }
  }

  std::vector<std::pair<const char*, std::size_t>> ranges_;
  std::vector<std::pair<const char*, std::size_t>> pieces_;
  std::vector<std::thread> pool_;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::size_t> touched_{0};
  std::atomic<unsigned> sink_{0};
  std::atomic<bool> stop_{false};
};

// HEARTH_AFFINE_GEMV (docs/reference/cli.md), read once at load: unset, "auto" or "tensor"
// give kAuto (the tensor-core kernel wherever it applies, the register kernel elsewhere, and
// fused decode steps), "register" kRegister (the HFMA2 kernel on the unfused decode layer:
// the A/B baseline). Other values are ignored with a warning.
cuda::AffineGemvKernel affine_kernel_from_env() {
  const char* env = std::getenv("HEARTH_AFFINE_GEMV");
  if (env == nullptr || *env == '\0') return cuda::AffineGemvKernel::kAuto;
  const std::string_view value(env);
  if (value == "register") return cuda::AffineGemvKernel::kRegister;
  if (value != "auto" && value != "tensor") {
    spdlog::warn("HEARTH_AFFINE_GEMV={} is not auto, tensor or register; using auto", value);
  }
  return cuda::AffineGemvKernel::kAuto;
}

// HEARTH_AFFINE_LAYOUT (docs/reference/cli.md), read once at load: unset or "tiled" relays
// the quantized weights the fused decode step runs on the tensor-core GEMV into its tiled
// layout; "row-major" keeps MLX's (the A/B baseline). Other values: tiled, with a warning.
bool tiled_weights_from_env() {
  const char* env = std::getenv("HEARTH_AFFINE_LAYOUT");
  if (env == nullptr || *env == '\0') return true;
  const std::string_view value(env);
  if (value == "row-major") return false;
  if (value != "tiled") {
    spdlog::warn("HEARTH_AFFINE_LAYOUT={} is not tiled or row-major; using tiled", value);
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<Model>> load_cuda_model(const std::string& dir,
                                               const CudaLoadOptions& options) {
  // The CUDA context and cuBLASLt start on their own thread (hundreds of ms) while the
  // shards are indexed and their pages mapped in.
  Stopwatch watch;
  cuda::DeviceContextOptions ctx_options;
  ctx_options.device = options.device;
  ctx_options.memory_budget = options.memory_budget;
  auto ctx_future = std::async(std::launch::async, [ctx_options, &watch] {
    auto ctx = DeviceContext::create(ctx_options);
    spdlog::debug("cuda load: device context ready at {:.0f} ms", watch.elapsed_ms());
    return ctx;
  });
  HEARTH_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  auto store = WeightStore::open(dir);
  if (!store.ok()) return store.status().with_context(fmt::format("loading {}", dir));
  auto weights = load_llama_weights(config, *store);
  if (!weights.ok()) return weights.status().with_context(fmt::format("loading {}", dir));
  if (options.batch_invariant && !weights->layers.empty() && weights->layers[0].q.w.quantized()) {
    return unsupported_error(
        "--batch-invariant on: the CUDA backend has it for bf16 models only, and {} is "
        "quantized (use --device cpu, or --batch-invariant off)",
        dir);
  }
  spdlog::debug("cuda load: {} indexed at {:.0f} ms", dir, watch.elapsed_ms());
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.upload_threads > 0 ? options.upload_threads : std::min(8, hw);
  Prefault prefault(weight_ranges(*weights), threads);
  auto ctx = ctx_future.get();
  const std::size_t touched = prefault.stop();
  spdlog::debug("cuda load: {:.2f} GB of pages mapped in while the context started", touched / 1e9);
  if (!ctx.ok()) return ctx.status().with_context("starting the CUDA backend");
  HEARTH_RETURN_IF_ERROR((*ctx)->make_current());
  auto model = std::make_unique<CudaLlamaModel>(std::move(config), std::move(ctx).value(),
                                                options.compiled_decode, threads,
                                                options.gate_up_block, affine_kernel_from_env(),
                                                tiled_weights_from_env(), options.batch_invariant);
  Status st = model->load(*weights, store->total_bytes(), options.show_progress);
  if (!st.ok()) return st.with_context(fmt::format("uploading {} to the GPU", dir));
  spdlog::debug("cuda load: model ready at {:.0f} ms", watch.elapsed_ms());
  // Unmapping the shards (millions of mapped pages) runs beside the first steps.
  auto host = std::make_unique<std::pair<WeightStore, LlamaWeights>>(std::move(store).value(),
                                                                     std::move(weights).value());
  model->release_host_weights(std::move(host));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace hearth
