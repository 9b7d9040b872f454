// run_engine_benchmark: one sink per request records time to first token and its finish; the
// calling thread waits for all finishes, then reduces the timings.
#include "engine/benchmark.h"

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <vector>

#include "base/clock.h"
#include "engine/sampler.h"

namespace hearth::engine {
namespace {

struct Shared {
  std::mutex mutex;
  std::condition_variable done;
  int finished = 0;
  Status first_error;
};

class TimingSink : public RequestSink {
 public:
  TimingSink(Shared& shared, int64_t start_ns) : shared_(shared), start_ns_(start_ns) {}
  void on_tokens(std::span<const int32_t> tokens, std::span<const TokenLogprobs>) override {
    const int64_t now = monotonic_ns();
    if (generated_ == 0) first_token_ns = now;
    generated_ += static_cast<int64_t>(tokens.size());
    token_ns.insert(token_ns.end(), tokens.size(), now);
  }
  void on_finish(const FinishInfo& info) override {
    finish_ns = monotonic_ns();
    completion_tokens = info.completion_tokens;
    cached_tokens = info.cached_tokens;
    std::lock_guard lock(shared_.mutex);
    if (info.reason != FinishReason::kLength && shared_.first_error.ok()) {
      shared_.first_error = info.status.ok() ? internal_error("request finished early ({})",
                                                              finish_reason_name(info.reason))
                                             : info.status;
    }
    ++shared_.finished;
    shared_.done.notify_all();
  }
  double ttft_ms() const { return static_cast<double>(first_token_ns - start_ns_) * 1e-6; }

  int64_t first_token_ns = 0;
  int64_t finish_ns = 0;
  std::vector<int64_t> token_ns;  // [generated] delivery time of each token
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;

 private:
  Shared& shared_;
  int64_t start_ns_;
  int64_t generated_ = 0;
};

// Tokens per second over the steps where every request decodes (see EngineBenchmarkResult).
// Tokens of one step reach the sinks within microseconds of each other, while steps are a
// whole inter-token gap apart, so half the median gap separates one step from the next:
// the window opens just after the step that delivered the last first token and closes just
// after the step that finished the first request.
double full_batch_rate(const std::vector<std::shared_ptr<TimingSink>>& sinks) {
  int64_t all_decoding = 0;
  int64_t first_finish = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> gaps;
  for (const auto& sink : sinks) {
    all_decoding = std::max(all_decoding, sink->first_token_ns);
    first_finish = std::min(first_finish, sink->finish_ns);
    for (size_t i = 1; i < sink->token_ns.size(); ++i) {
      if (sink->token_ns[i] > sink->token_ns[i - 1]) {
        gaps.push_back(sink->token_ns[i] - sink->token_ns[i - 1]);
      }
    }
  }
  if (gaps.empty() || first_finish <= all_decoding) return 0;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                   gaps.end());
  const int64_t half_gap = gaps[gaps.size() / 2] / 2;
  const int64_t open = all_decoding + half_gap;
  const int64_t close = first_finish + half_gap;
  if (first_finish - all_decoding < 3 * half_gap) return 0;  // under 2 steps: no figure
  int64_t tokens = 0;
  for (const auto& sink : sinks) {
    for (int64_t t : sink->token_ns) tokens += (t > open && t <= close) ? 1 : 0;
  }
  return static_cast<double>(tokens) / (static_cast<double>(first_finish - all_decoding) * 1e-9);
}

}  // namespace

Result<EngineBenchmarkResult> run_engine_benchmark(Engine& engine,
                                                   const EngineBenchmarkSpec& spec) {
  if (spec.num_requests < 1 || spec.prompt_tokens < 1 || spec.generated_tokens < 1) {
    return invalid_argument_error("benchmark needs >= 1 request, prompt token and token");
  }
  const int32_t vocab = engine.model().config().vocab_size;
  SamplerRng rng(spec.seed);
  auto random_prompt = [&] {
    std::vector<int32_t> prompt(static_cast<size_t>(spec.prompt_tokens));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng.next_u64() % vocab);
    return prompt;
  };
  std::vector<int32_t> shared_prompt = random_prompt();
  SamplingParams params;
  params.temperature = 0;
  params.ignore_eos = true;
  params.max_tokens = spec.generated_tokens;

  Shared shared;
  std::vector<std::shared_ptr<TimingSink>> sinks;
  int64_t start_ns = monotonic_ns();
  std::vector<RequestId> ids;
  Status submit_error;
  for (int i = 0; i < spec.num_requests && submit_error.ok(); ++i) {
    auto sink = std::make_shared<TimingSink>(shared, start_ns);
    auto id = engine.submit(spec.shared_prompt ? shared_prompt : random_prompt(), params, sink);
    if (!id.ok()) {
      submit_error = id.status().with_context("benchmark request");
      for (RequestId submitted : ids) engine.cancel(submitted);  // sinks point at `shared`
    } else {
      ids.push_back(*id);
      sinks.push_back(std::move(sink));
    }
  }
  {
    std::unique_lock lock(shared.mutex);
    shared.done.wait(lock, [&] { return shared.finished == static_cast<int>(ids.size()); });
    if (!submit_error.ok()) return submit_error;
    if (!shared.first_error.ok()) return shared.first_error;
  }

  EngineBenchmarkResult r;
  r.num_requests = spec.num_requests;
  std::vector<double> ttft;
  int64_t last_finish = start_ns;
  std::vector<int64_t> first_tokens;
  for (const auto& sink : sinks) {
    ttft.push_back(sink->ttft_ms());
    first_tokens.push_back(sink->first_token_ns);
    last_finish = std::max(last_finish, sink->finish_ns);
    r.generated_tokens += sink->completion_tokens;
    r.cached_tokens += sink->cached_tokens;
  }
  r.prompt_tokens = static_cast<int64_t>(spec.num_requests) * spec.prompt_tokens;
  std::sort(ttft.begin(), ttft.end());
  std::sort(first_tokens.begin(), first_tokens.end());
  r.ttft_ms_median = ttft[ttft.size() / 2];
  r.ttft_ms_max = ttft.back();
  r.wall_s = static_cast<double>(last_finish - start_ns) * 1e-9;
  r.output_tokens_per_s = static_cast<double>(r.generated_tokens) / std::max(r.wall_s, 1e-9);
  double decode_s = static_cast<double>(last_finish - first_tokens[first_tokens.size() / 2]) * 1e-9;
  r.decode_tokens_per_s =
      static_cast<double>(r.generated_tokens - spec.num_requests) / std::max(decode_s, 1e-9);
  r.full_batch_decode_tokens_per_s = full_batch_rate(sinks);
  return r;
}

}  // namespace hearth::engine
