// Request: one generation as the engine thread sees it — its tokens, how many of them are in
// KV (num_computed_tokens), the blocks holding them, its sampler, and the sink its tokens go
// to. RequestSink is how the engine talks back to whoever submitted it (server, CLI, bench).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "kv/block_pool.h"

namespace hearth::engine {

using RequestId = uint64_t;

enum class FinishReason {
  kStop,       // EOS or a stop token id
  kLength,     // max_tokens or the model's context
  kCancelled,  // cancel() or engine shutdown
  kError,      // the forward pass failed; see FinishInfo::status
};

std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", ...

struct FinishInfo {
  FinishReason reason = FinishReason::kStop;
  int prompt_tokens = 0;
  int cached_tokens = 0;              // prompt tokens served from the prefix cache
  int completion_tokens = 0;          // sampled tokens, including a final stop token
  std::optional<int32_t> stop_token;  // the EOS / stop id that ended it (not sent on_tokens)
  Status status;                      // non-ok with kError (and kCancelled on shutdown)
};

// Called on the engine thread; implementations must return quickly and never block on the
// engine (queue the work elsewhere).
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // New tokens of this request, in order; `logprobs` is empty unless the request asked for
  // logprobs, else one entry per token.
  virtual void on_tokens(std::span<const int32_t> tokens,
                         std::span<const TokenLogprobs> logprobs) = 0;
  // Exactly once, last.
  virtual void on_finish(const FinishInfo& info) = 0;
};

enum class RequestState { kWaiting, kRunning, kFinished };

struct Request {
  Request(RequestId id, std::vector<int32_t> prompt, const SamplingParams& params,
          std::shared_ptr<RequestSink> sink)
      : id(id),
        tokens(std::move(prompt)),
        num_prompt_tokens(static_cast<int>(tokens.size())),
        params(params),
        sampler(params),
        sink(std::move(sink)) {}

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt() const {
    return std::span(tokens).first(static_cast<size_t>(num_prompt_tokens));
  }
  std::span<const int32_t> output() const {
    return std::span(tokens).subspan(static_cast<size_t>(num_prompt_tokens));
  }

  RequestId id;
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int num_prompt_tokens;
  SamplingParams params;
  Sampler sampler;
  std::shared_ptr<RequestSink> sink;

  RequestState state = RequestState::kWaiting;
  int num_computed_tokens = 0;           // tokens whose K/V are in the block table's blocks
  std::vector<kv::BlockId> block_table;  // [ceil(tokens in KV / block_size)]
  std::vector<uint64_t> block_hashes;    // chained names of the full blocks of `tokens`
  int num_published_blocks = 0;          // leading blocks already offered to the prefix cache
  // [num_published_blocks] the prefix-cache serial each published block's content is cached
  // under (PrefixCache::kNoEntry after a hash collision): the parent of the next block.
  std::vector<uint64_t> block_serials;
  bool admitted_once = false;
  int cached_tokens = 0;  // prefix-cache hit at first admission
  int completion_tokens = 0;
  int preemptions = 0;
  bool cancel_requested = false;
};

}  // namespace hearth::engine
