// Scheduler implementation. Order of a step: reap cancellations, give every running request
// (oldest first) its next tokens under the budget — preempting the newest when blocks run
// out — then, if nothing was preempted, admit waiting requests FIFO; forward; sample; emit.
#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "base/clock.h"

namespace hearth::engine {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

Scheduler::Scheduler(const SchedulerOptions& options)
    : options_(options),
      pool_(options.num_blocks),
      cache_(pool_, {.block_size = options.block_size,
                     .namespace_hash = options.cache_namespace,
                     .max_idle_blocks = options.max_idle_cached_blocks,
                     .hash_bits = options.prefix_hash_bits}) {
  HEARTH_CHECK(options.max_running >= 1 && options.max_batched_tokens >= 1);
}

int Scheduler::blocks_for(int tokens) const {
  return (tokens + options_.block_size - 1) / options_.block_size;
}

Status Scheduler::check_admissible(std::span<const int32_t> prompt,
                                   const SamplingParams& params) const {
  if (prompt.empty()) return invalid_argument_error("the prompt is empty");
  for (int32_t id : prompt) {
    if (id < 0 || (options_.vocab_size > 0 && id >= options_.vocab_size)) {
      return invalid_argument_error("prompt token id {} is outside the vocabulary (size {})", id,
                                    options_.vocab_size);
    }
  }
  HEARTH_RETURN_IF_ERROR(params.validate(options_.vocab_size));
  int64_t total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (options_.max_context > 0 && total > options_.max_context) {
    return out_of_range_error(
        "prompt ({} tokens) + max_tokens ({}) = {} tokens exceeds the model's context of {} "
        "tokens",
        prompt.size(), params.max_tokens, total, options_.max_context);
  }
  // The last sampled token is never written to KV.
  int64_t kv_tokens = total - 1;
  int64_t pool_tokens = static_cast<int64_t>(options_.num_blocks) * options_.block_size;
  if (kv_tokens > pool_tokens) {
    return out_of_range_error(
        "prompt ({} tokens) + max_tokens ({}) needs KV for {} tokens but the KV budget holds "
        "{} tokens ({} blocks of {}); raise --kv-budget or lower max_tokens",
        prompt.size(), params.max_tokens, kv_tokens, pool_tokens, options_.num_blocks,
        options_.block_size);
  }
  return ok_status();
}

void Scheduler::add(std::unique_ptr<Request> request) {
  Request* raw = request.get();
  HEARTH_CHECK(!requests_.contains(raw->id), "duplicate request id {}", raw->id);
  raw->state = RequestState::kWaiting;
  requests_.emplace(raw->id, std::move(request));
  waiting_.push_back(raw);
}

void Scheduler::cancel(RequestId id) {
  auto it = requests_.find(id);
  if (it != requests_.end()) it->second->cancel_requested = true;
}

void Scheduler::release_blocks(Request& request) {
  // Tail first: deeper blocks of a chain become least recently used before its root.
  for (auto it = request.block_table.rbegin(); it != request.block_table.rend(); ++it) {
    cache_.release(*it);
  }
  request.block_table.clear();
  request.num_published_blocks = 0;
  request.block_serials.clear();
}

void Scheduler::finish(Request& request, FinishReason reason, Status status,
                       std::optional<int32_t> stop_token) {
  HEARTH_CHECK(request.state != RequestState::kFinished, "request {} finished twice", request.id);
  release_blocks(request);
  std::erase(running_, &request);
  std::erase(waiting_, &request);
  request.state = RequestState::kFinished;
  ++requests_finished_;
  FinishInfo info;
  info.reason = reason;
  info.prompt_tokens = request.num_prompt_tokens;
  info.cached_tokens = request.cached_tokens;
  info.completion_tokens = request.completion_tokens;
  info.stop_token = stop_token;
  info.status = std::move(status);
  if (request.sink) request.sink->on_finish(info);
}

void Scheduler::abort_all(FinishReason reason, const Status& status) {
  for (auto& [id, request] : requests_) {
    if (request->state != RequestState::kFinished) finish(*request, reason, status);
  }
  erase_finished();
}

void Scheduler::reap_cancelled() {
  for (auto& [id, request] : requests_) {
    if (request->cancel_requested && request->state != RequestState::kFinished) {
      finish(*request, FinishReason::kCancelled);
    }
  }
}

void Scheduler::erase_finished() {
  std::erase_if(requests_,
                [](const auto& entry) { return entry.second->state == RequestState::kFinished; });
}

void Scheduler::preempt(Request& request) {
  release_blocks(request);
  request.num_computed_tokens = 0;
  request.state = RequestState::kWaiting;
  std::erase(running_, &request);
  waiting_.push_front(&request);
  ++request.preemptions;
  ++preemptions_;
}

bool Scheduler::ensure_blocks(Request& request, int total_tokens) {
  int need = blocks_for(total_tokens) - static_cast<int>(request.block_table.size());
  if (need > cache_.num_allocatable()) return false;
  for (int i = 0; i < need; ++i) {
    std::optional<kv::BlockId> id = cache_.allocate();
    HEARTH_CHECK(id.has_value(), "allocatable block vanished");
    request.block_table.push_back(*id);
  }
  return true;
}

bool Scheduler::try_admit(Request& request, int& budget, std::vector<Scheduled>& scheduled) {
  const int bs = options_.block_size;
  cache_.extend_hashes(request.tokens, request.block_hashes);
  // At least one token is always computed: its logits give the next token.
  int max_hit_blocks = (request.num_tokens() - 1) / bs;
  int hits = std::min(cache_.count_hits(request.tokens, request.block_hashes), max_hit_blocks);
  request.block_table =
      cache_.acquire(request.tokens, request.block_hashes, hits, request.block_serials);
  request.num_published_blocks = hits;
  int computed = hits * bs;
  int num_new = std::min(request.num_tokens() - computed, budget);
  if (!ensure_blocks(request, computed + num_new)) {
    release_blocks(request);
    return false;
  }
  request.num_computed_tokens = computed;
  if (!request.admitted_once) {
    request.admitted_once = true;
    request.cached_tokens = computed;
    prefix_query_tokens_ += request.num_prompt_tokens;
    prefix_hit_tokens_ += computed;
  }
  request.state = RequestState::kRunning;
  running_.push_back(&request);
  scheduled.push_back({&request, num_new});
  budget -= num_new;
  return true;
}

void Scheduler::schedule() {
  std::vector<Scheduled>& scheduled = scheduled_;
  scheduled.clear();
  int budget = options_.max_batched_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request& request = *running_[i];
    int num_new = std::min(request.num_tokens() - request.num_computed_tokens, budget);
    HEARTH_CHECK(num_new > 0, "running request {} has nothing to compute", request.id);
    bool self_preempted = false;
    while (!ensure_blocks(request, request.num_computed_tokens + num_new)) {
      Request* victim = running_.back();
      preempt(*victim);
      preempted = true;
      if (victim == &request) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    scheduled.push_back({&request, num_new});
    budget -= num_new;
    ++i;
  }
  if (preempted) return;
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < options_.max_running) {
    Request& request = *waiting_.front();
    if (!try_admit(request, budget, scheduled)) break;  // FIFO: nobody overtakes the head
    waiting_.pop_front();
  }
}

void Scheduler::publish_full_blocks(Request& request) {
  int full = request.num_computed_tokens / options_.block_size;
  if (full <= request.num_published_blocks) return;
  cache_.extend_hashes(request.tokens, request.block_hashes);
  const size_t bs = static_cast<size_t>(options_.block_size);
  for (int b = request.num_published_blocks; b < full; ++b) {
    uint64_t parent = b == 0 ? kv::PrefixCache::kRoot : request.block_serials[b - 1];
    std::span<const int32_t> tokens =
        std::span(request.tokens).subspan(static_cast<size_t>(b) * bs, bs);
    request.block_serials.push_back(
        cache_.publish(request.block_table[b], request.block_hashes[b], tokens, parent));
  }
  request.num_published_blocks = full;
}

void Scheduler::accept_token(Request& request, int32_t token, const TokenLogprobs* logprobs) {
  ++request.completion_tokens;
  ++generation_tokens_total_;
  const SamplingParams& params = request.params;
  bool is_eos =
      !params.ignore_eos && std::ranges::find(options_.eos_ids, token) != options_.eos_ids.end();
  bool is_stop = std::ranges::find(params.stop_token_ids, token) != params.stop_token_ids.end();
  if (is_eos || is_stop) {
    finish(request, FinishReason::kStop, {}, token);
    return;
  }
  request.tokens.push_back(token);
  if (request.sink) {
    std::span<const TokenLogprobs> lp;
    if (logprobs != nullptr) lp = std::span(logprobs, 1);
    request.sink->on_tokens(std::span(&token, 1), lp);
  }
  if (request.num_output_tokens() >= params.max_tokens ||
      (options_.max_context > 0 && request.num_tokens() >= options_.max_context)) {
    finish(request, FinishReason::kLength);
  }
}

namespace {

// The device sampler's view of a request's next draw: its parameters, the penalty
// contexts, and its seed with the output length as the step (a seeded request draws the
// same tokens whatever shares its batch).
RowSampling device_row_sampling(const Request& r) {
  const SamplingParams& p = r.params;
  RowSampling row;
  row.on_host = p.logprobs >= 0 || p.xtc_probability > 0.0f;
  row.temperature = p.is_greedy() ? 0.0f : p.temperature;
  row.top_k = p.top_k;
  row.top_p = p.top_p;
  row.min_p = p.min_p;
  row.repetition_penalty = p.repetition_penalty;
  row.presence_penalty = p.presence_penalty;
  row.frequency_penalty = p.frequency_penalty;
  row.logit_bias = p.logit_bias;
  row.prompt_tokens = r.prompt();
  row.output_tokens = r.output();
  row.seed = r.sampler.seed();
  row.step = static_cast<uint64_t>(r.num_output_tokens());
  return row;
}

}  // namespace

Status Scheduler::step(Model& model) {
  reap_cancelled();
  schedule();
  const std::vector<Scheduled>& scheduled = scheduled_;
  if (scheduled.empty()) {
    erase_finished();
    return ok_status();
  }

  batch_tokens_.clear();
  batch_positions_.clear();
  batch_slices_.clear();
  logit_rows_.clear();
  for (const Scheduled& s : scheduled) {
    Request& r = *s.request;
    SequenceSlice slice;
    slice.first_token = static_cast<int32_t>(batch_tokens_.size());
    slice.num_tokens = s.num_new_tokens;
    slice.num_cached = r.num_computed_tokens;
    slice.block_table = r.block_table;
    for (int j = 0; j < s.num_new_tokens; ++j) {
      batch_tokens_.push_back(r.tokens[r.num_computed_tokens + j]);
      batch_positions_.push_back(r.num_computed_tokens + j);
    }
    if (r.num_computed_tokens + s.num_new_tokens == r.num_tokens()) {
      logit_rows_.push_back(slice.first_token + s.num_new_tokens - 1);
    }
    batch_slices_.push_back(slice);
  }
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  ForwardBatch batch{batch_tokens_, batch_positions_, batch_slices_, logit_rows_};
  // A model that samples on the device gets each row's parameters and returns ids; rows
  // that need the host sampler (logprobs, XTC) come back as logits.
  const bool device_sampling = model.samples_on_device();
  std::vector<RowSampling> row_sampling;
  std::vector<int32_t> sampled;
  Status status;
  if (device_sampling) {
    size_t host_rows = 0;
    for (const Scheduled& s : scheduled) {
      const Request& r = *s.request;
      if (r.num_computed_tokens + s.num_new_tokens != r.num_tokens()) continue;
      row_sampling.push_back(device_row_sampling(r));
      host_rows += row_sampling.back().on_host ? 1 : 0;
    }
    logits_.resize(host_rows * vocab);
    sampled.resize(row_sampling.size());
    status = model.forward_sample(batch, row_sampling, sampled, logits_);
  } else {
    logits_.resize(logit_rows_.size() * vocab);
    status = model.forward(batch, logits_);
  }
  ++steps_;
  if (!status.ok()) {
    for (const Scheduled& s : scheduled) {
      if (s.request->state != RequestState::kFinished) {
        finish(*s.request, FinishReason::kError, status.with_context("forward pass"));
      }
    }
    erase_finished();
    return status;
  }

  int64_t prompt_computed = 0;
  int64_t generated = generation_tokens_total_;
  size_t row = 0;
  size_t host_row = 0;
  for (const Scheduled& s : scheduled) {
    Request& r = *s.request;
    int before = r.num_computed_tokens;
    r.num_computed_tokens += s.num_new_tokens;
    prompt_computed += std::max(0, std::min(r.num_computed_tokens, r.num_prompt_tokens) - before);
    publish_full_blocks(r);
    if (r.num_computed_tokens != r.num_tokens()) continue;
    if (device_sampling && !row_sampling[row].on_host) {
      accept_token(r, sampled[row++], nullptr);
      continue;
    }
    ++row;
    std::span<float> row_logits(logits_.data() + host_row++ * vocab, vocab);
    TokenLogprobs logprobs;
    bool want_logprobs = r.params.logprobs >= 0;
    int32_t token =
        r.sampler.sample(row_logits, r.prompt(), r.output(), want_logprobs ? &logprobs : nullptr);
    accept_token(r, token, want_logprobs ? &logprobs : nullptr);
  }
  prompt_tokens_total_ += prompt_computed;
  meter_.record(monotonic_ns(), prompt_computed, generation_tokens_total_ - generated);
  erase_finished();
  return ok_status();
}

EngineStats Scheduler::stats() const {
  EngineStats s;
  s.running = static_cast<int>(running_.size());
  s.waiting = static_cast<int>(waiting_.size());
  s.preemptions = preemptions_;
  s.blocks_total = pool_.num_blocks();
  s.blocks_used = cache_.num_used();
  s.blocks_free = pool_.num_free();
  s.blocks_cached = cache_.num_cached();
  s.blocks_idle = cache_.num_idle();
  s.block_size = options_.block_size;
  s.prefix_query_tokens = prefix_query_tokens_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.prefix_hit_rate = prefix_query_tokens_ > 0 ? static_cast<double>(prefix_hit_tokens_) /
                                                     static_cast<double>(prefix_query_tokens_)
                                               : 0.0;
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = generation_tokens_total_;
  s.requests_finished = requests_finished_;
  s.steps = steps_;
  meter_.rates(monotonic_ns(), s.prompt_tokens_per_s, s.generation_tokens_per_s);
  return s;
}

void Scheduler::check_invariants() const {
  std::vector<int> holders(static_cast<size_t>(pool_.num_blocks()), 0);
  for (const Request* r : running_) {
    HEARTH_CHECK(r->state == RequestState::kRunning);
    HEARTH_CHECK(static_cast<int>(r->block_table.size()) >= blocks_for(r->num_computed_tokens),
                 "request {} holds too few blocks", r->id);
    for (kv::BlockId b : r->block_table) ++holders[b];
  }
  for (const Request* r : waiting_) {
    HEARTH_CHECK(r->state == RequestState::kWaiting);
    HEARTH_CHECK(r->block_table.empty() && r->num_computed_tokens == 0,
                 "waiting request {} holds KV", r->id);
  }
  int used = 0;
  for (kv::BlockId b = 0; b < pool_.num_blocks(); ++b) {
    HEARTH_CHECK(pool_.ref_count(b) == holders[b], "block {}: {} references, {} holders", b,
                 pool_.ref_count(b), holders[b]);
    if (holders[b] > 0) {
      ++used;
      HEARTH_CHECK(!pool_.is_free(b), "block {} is held and free", b);
    }
    HEARTH_CHECK(holders[b] <= 1 || cache_.is_named(b), "unnamed block {} is shared", b);
  }
  HEARTH_CHECK(used == cache_.num_used(), "{} blocks held, pool says {}", used, cache_.num_used());
  HEARTH_CHECK(static_cast<int>(running_.size()) <= options_.max_running);
}

std::vector<RequestId> Scheduler::running_ids() const {
  std::vector<RequestId> ids;
  for (const Request* r : running_) ids.push_back(r->id);
  return ids;
}

}  // namespace hearth::engine
