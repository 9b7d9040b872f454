// GenerationJob: the per-request state shared by the n choices' engine sinks. All of it is
// guarded by one mutex; sinks run on the engine thread and only format and post bytes.
#include "server/generation_job.h"

#include <fmt/format.h>

#include <chrono>
#include <mutex>

#include "base/clock.h"
#include "base/log.h"
#include "server/api_format.h"
#include "server/choice_output.h"
#include "text/reasoning_parser.h"

namespace hearth::server {
namespace {

using nlohmann::json;

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(GenerationRequest request, std::shared_ptr<ModelBackend> backend,
                std::shared_ptr<Exchange> exchange, std::shared_ptr<ServerMetrics> metrics,
                std::unique_ptr<ApiFormatter> formatter, const ChoiceOutputOptions& options,
                int prompt_tokens)
      : request_(std::move(request)),
        backend_(std::move(backend)),
        exchange_(std::move(exchange)),
        metrics_(std::move(metrics)),
        formatter_(std::move(formatter)),
        prompt_tokens_(prompt_tokens) {
    for (int i = 0; i < request_.n; ++i) {
      choices_.push_back(std::make_unique<Choice>(options));
    }
  }

  // The backend owns the sinks until on_finish; they own the job. The exchange's cancel
  // hook holds it weakly, so nothing cycles.
  struct Sink : GenerationSink {
    std::shared_ptr<GenerationJob> job;
    int choice = 0;
    void on_tokens(std::vector<StreamToken> tokens) override {
      job->on_tokens(choice, std::move(tokens));
    }
    void on_finish(const GenerationOutcome& outcome) override { job->on_finish(choice, outcome); }
  };

  // Submits every choice without holding the job lock (an engine thread may be calling a
  // sink meanwhile). Stream bytes produced before the head is sent wait in early_.
  Status start(const std::vector<int32_t>& prompt, const engine::SamplingParams& params) {
    for (int i = 0; i < request_.n; ++i) {
      auto sink = std::make_shared<Sink>();
      sink->job = shared_from_this();
      sink->choice = i;
      engine::SamplingParams p = params;
      if (p.seed && i > 0) p.seed = *p.seed + static_cast<uint64_t>(i);
      auto id = backend_->submit(prompt, p, sink);
      if (!id.ok()) {
        std::vector<uint64_t> started;
        {
          std::lock_guard lock(mu_);
          client_gone_ = true;  // nothing more goes to the client from this job
          for (int k = 0; k < i; ++k) started.push_back(choices_[k]->request_id);
        }
        for (uint64_t rid : started) backend_->cancel(rid);
        return id.status();
      }
      bool cancel_now = false;
      {
        std::lock_guard lock(mu_);
        choices_[i]->request_id = *id;
        choices_[i]->submitted = true;
        cancel_now = choices_[i]->cancel_wanted || client_gone_;
      }
      if (cancel_now) backend_->cancel(*id);
    }
    std::lock_guard lock(mu_);
    started_ = true;
    if (request_.stream && !client_gone_) {
      HttpResponse head;
      head.content_type = "text/event-stream";
      head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
      exchange_->begin_stream(std::move(head));
      exchange_->write(formatter_->stream_begin(prompt_tokens_) + early_);
      early_.clear();
    }
    if (done_) deliver_final();
    return ok_status();
  }

  void cancel_all() {
    std::vector<uint64_t> ids;
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      client_gone_ = true;
      for (auto& c : choices_) {
        if (c->submitted && !c->finished) ids.push_back(c->request_id);
      }
    }
    metrics_->requests_cancelled.fetch_add(1);
    for (uint64_t id : ids) backend_->cancel(id);
  }

  int64_t start_ns = monotonic_ns();

 private:
  struct Choice {
    explicit Choice(const ChoiceOutputOptions& o) : output(o) {}
    ChoiceOutput output;
    ChoiceResult result;
    std::vector<LogprobEntry> pending_logprobs;
    uint64_t request_id = 0;
    bool submitted = false;
    bool cancel_sent = false;
    bool cancel_wanted = false;  // stopped before submit() returned its id
    bool finished = false;
  };

  LogprobEntry logprob_entry(const StreamToken& t) const {
    LogprobEntry e;
    auto text = backend_->detokenize(std::span<const int32_t>(&t.id, 1), false);
    e.token = text.ok() ? *text : t.text;
    e.logprob = t.logprobs->logprob;
    int want = request_.top_logprobs;
    for (const auto& alt : t.logprobs->top) {
      if (static_cast<int>(e.top.size()) >= want) break;
      auto alt_text = backend_->detokenize(std::span<const int32_t>(&alt.token, 1), false);
      e.top.emplace_back(alt_text.ok() ? *alt_text : std::string(), alt.logprob);
    }
    return e;
  }

  void emit(int index, Choice& c, std::vector<OutputDelta>& deltas) {
    for (auto& d : deltas) {
      switch (d.kind) {
        case OutputDelta::Kind::kContent:
          c.result.content += d.text;
          break;
        case OutputDelta::Kind::kReasoning:
          c.result.reasoning += d.text;
          break;
        case OutputDelta::Kind::kToolCall:
          c.result.calls.push_back(d.call);
          break;
      }
      if (request_.stream && !client_gone_) {
        std::vector<LogprobEntry> lps;
        if (d.kind == OutputDelta::Kind::kContent) lps = std::move(c.pending_logprobs);
        c.pending_logprobs.clear();
        stream_out(formatter_->stream_delta(index, d, std::move(lps)));
      }
    }
    deltas.clear();
  }

  void on_tokens(int index, std::vector<StreamToken> tokens) {
    std::optional<uint64_t> to_cancel;
    {
      std::lock_guard lock(mu_);
      Choice& c = *choices_[index];
      if (c.finished || c.output.stopped()) return;
      if (!first_token_seen_) {
        first_token_seen_ = true;
        metrics_->ttft_us_total.fetch_add((monotonic_ns() - start_ns) / 1000);
        metrics_->ttft_count.fetch_add(1);
      }
      std::vector<OutputDelta> deltas;
      for (auto& t : tokens) {
        if (c.output.stopped()) break;
        if (t.id >= 0) ++c.result.completion_tokens;
        if (request_.logprobs && t.logprobs) {
          LogprobEntry e = logprob_entry(t);
          c.pending_logprobs.push_back(e);
          if (!request_.stream) c.result.logprobs.push_back(std::move(e));
        }
        c.output.push(t.text, deltas);
      }
      emit(index, c, deltas);
      if (c.output.stopped() && !c.cancel_sent) {
        c.cancel_sent = true;
        if (c.submitted) {
          to_cancel = c.request_id;
        } else {
          c.cancel_wanted = true;
        }
      }
    }
    // Outside the lock: the stop string ended this choice; the engine frees it now.
    if (to_cancel) backend_->cancel(*to_cancel);
  }

  void on_finish(int index, const GenerationOutcome& outcome) {
    std::lock_guard lock(mu_);
    Choice& c = *choices_[index];
    if (c.finished) return;
    c.finished = true;
    cached_tokens_ = std::max(cached_tokens_, outcome.cached_tokens);
    if (outcome.reason == FinishReason::kError) {
      error_ = outcome.status;
      spdlog::error("generation failed: {}", outcome.status.to_string());
    }
    bool stopped_by_string = c.output.stopped();
    // The engine's count includes a final EOS that never reaches on_tokens.
    if (!stopped_by_string && outcome.completion_tokens > c.result.completion_tokens) {
      c.result.completion_tokens = outcome.completion_tokens;
    }
    std::vector<OutputDelta> deltas;
    c.output.finish(deltas);
    emit(index, c, deltas);
    if (stopped_by_string) {
      c.result.finish = "stop";
      c.result.stop_sequence = c.output.matched_stop();
    } else if (outcome.reason == FinishReason::kLength) {
      c.result.finish = "length";
    } else if (outcome.reason == FinishReason::kError) {
      c.result.finish = "error";
    } else {
      c.result.finish = "stop";
    }
    if (c.result.finish == "stop" && !c.result.calls.empty() &&
        request_.api != ApiKind::kCompletions) {
      c.result.finish = "tool_calls";
    }
    if (request_.stream && !client_gone_) {
      stream_out(formatter_->stream_finish(index, c.result, std::move(c.pending_logprobs)));
    }
    c.pending_logprobs.clear();
    for (const auto& other : choices_) {
      if (!other->finished) return;
    }
    finish_all();
  }

  void stream_out(std::string bytes) {
    if (started_) {
      exchange_->write(std::move(bytes));
    } else {
      early_ += bytes;
    }
  }

  void finish_all() {
    done_ = true;
    UsageInfo usage;
    usage.prompt_tokens = prompt_tokens_;
    usage.cached_tokens = cached_tokens_;
    std::vector<ChoiceResult> results;
    for (auto& c : choices_) {
      usage.completion_tokens += c->result.completion_tokens;
      results.push_back(std::move(c->result));
    }
    metrics_->requests_active.fetch_sub(1);
    metrics_->prompt_tokens_total.fetch_add(usage.prompt_tokens);
    metrics_->cached_tokens_total.fetch_add(usage.cached_tokens);
    metrics_->completion_tokens_total.fetch_add(usage.completion_tokens);
    metrics_->latency_us_total.fetch_add((monotonic_ns() - start_ns) / 1000);
    metrics_->latency_count.fetch_add(1);
    results_ = std::move(results);
    usage_ = usage;
    if (started_) deliver_final();
  }

  void deliver_final() {
    if (client_gone_ || delivered_) return;
    delivered_ = true;
    const auto& results = results_;
    const auto& usage = usage_;
    bool all_failed = true;
    for (const auto& r : results) all_failed = all_failed && r.finish == "error";
    if (request_.stream) {
      if (!error_.ok() && all_failed) {
        exchange_->write(formatter_->stream_error(api_error_from_status(error_)));
      } else {
        exchange_->write(formatter_->stream_end(results, usage));
      }
      exchange_->end();
      return;
    }
    if (!error_.ok() && all_failed) {
      metrics_->requests_failed.fetch_add(1);
      exchange_->respond(render_error(api_error_from_status(error_), formatter_->flavor()));
      return;
    }
    HttpResponse r;
    r.body = dump_json(formatter_->complete(results, usage));
    exchange_->respond(std::move(r));
  }

  GenerationRequest request_;
  std::shared_ptr<ModelBackend> backend_;
  std::shared_ptr<Exchange> exchange_;
  std::shared_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ApiFormatter> formatter_;
  int prompt_tokens_;

  std::mutex mu_;
  std::vector<std::unique_ptr<Choice>> choices_;
  int cached_tokens_ = 0;
  Status error_;
  bool first_token_seen_ = false;
  bool client_gone_ = false;
  bool done_ = false;
  bool started_ = false;
  bool delivered_ = false;
  std::string early_;
  std::vector<ChoiceResult> results_;
  UsageInfo usage_;
};

json template_kwargs(const GenerationRequest& r, const GenerationDefaults& d) {
  json kwargs = r.template_kwargs.is_object() ? r.template_kwargs : json::object();
  std::optional<bool> thinking = r.enable_thinking ? r.enable_thinking : d.enable_thinking;
  if (thinking) kwargs["enable_thinking"] = *thinking;
  return kwargs;
}

json offered_tools(const GenerationRequest& r) {
  if (!r.tools.is_array() || r.tool_choice == ToolChoice::kNone) return nullptr;
  if (r.tool_choice != ToolChoice::kNamed) return r.tools;
  json only = json::array();
  for (const auto& t : r.tools) {
    if (t["function"]["name"] == r.tool_choice_name) only.push_back(t);
  }
  if (only.empty()) {
    throw_invalid(
        fmt::format("tool_choice names '{}', which is not among the tools", r.tool_choice_name),
        "tool_choice");
  }
  return only;
}

}  // namespace

RenderedPrompt render_prompt(const GenerationRequest& r, const ModelBackend& backend,
                             const GenerationDefaults& defaults) {
  RenderedPrompt out;
  if (r.api == ApiKind::kCompletions) {
    if (!r.prompt_ids.empty()) {
      for (int32_t id : r.prompt_ids) {
        if (id >= backend.vocab_size()) {
          throw_invalid(fmt::format("Invalid 'prompt': token id {} is outside the vocabulary "
                                    "(size {})",
                                    id, backend.vocab_size()),
                        "prompt");
        }
      }
      out.ids = r.prompt_ids;
      return out;
    }
    out.text = r.prompt;
    auto ids = backend.tokenize(r.prompt, /*add_special_tokens=*/true);
    if (!ids.ok()) throw ApiException{api_error_from_status(ids.status())};
    out.ids = std::move(*ids);
    return out;
  }
  if (!backend.has_chat_template()) {
    throw_invalid("the loaded model has no chat template; use /v1/completions with a raw prompt",
                  "messages");
  }
  auto text = backend.render_chat(r.messages, offered_tools(r), true, template_kwargs(r, defaults));
  if (!text.ok()) {
    ApiError e = api_error_from_status(text.status());
    e.message = "rendering the chat template failed: " + e.message;
    if (e.status >= 500) e.status = 400;
    throw ApiException{e};
  }
  out.text = std::move(*text);
  // The template already wrote BOS and friends, as transformers' apply_chat_template does.
  auto ids = backend.tokenize(out.text, /*add_special_tokens=*/false);
  if (!ids.ok()) throw ApiException{api_error_from_status(ids.status())};
  out.ids = std::move(*ids);
  return out;
}

void run_generation(GenerationRequest request, std::shared_ptr<ModelBackend> backend,
                    const GenerationDefaults& defaults, std::shared_ptr<Exchange> exchange,
                    std::shared_ptr<ServerMetrics> metrics) {
  ApiFlavor flavor = request.api == ApiKind::kMessages ? ApiFlavor::kAnthropic : ApiFlavor::kOpenAI;
  try {
    RenderedPrompt prompt = render_prompt(request, *backend, defaults);
    int ctx = backend->context_length();
    int n_prompt = static_cast<int>(prompt.ids.size());
    if (n_prompt == 0) throw_invalid("the prompt is empty", "prompt");
    if (n_prompt >= ctx) {
      throw_invalid(fmt::format("This model's maximum context length is {} tokens. However, your "
                                "prompt has {} tokens, leaving no room for a completion. Shorten "
                                "the prompt.",
                                ctx, n_prompt),
                    request.api == ApiKind::kCompletions ? "prompt" : "messages");
    }
    engine::SamplingParams params = request.sampling;
    if (!request.temperature_set && defaults.temperature)
      params.temperature = *defaults.temperature;
    if (!request.top_p_set && defaults.top_p) params.top_p = *defaults.top_p;
    if (!request.top_k_set && defaults.top_k) params.top_k = *defaults.top_k;
    int room = ctx - n_prompt;
    // A cap past the room left is clamped (agents send 32k for every model); the prompt
    // itself is never truncated.
    int wanted = request.max_tokens ? *request.max_tokens
                                    : (defaults.max_tokens ? *defaults.max_tokens : room);
    params.max_tokens = std::min(wanted, room);
    params.logprobs = request.logprobs ? request.top_logprobs : -1;
    for (const auto& [id, bias] : params.logit_bias) {
      if (id >= backend->vocab_size()) {
        throw_invalid(fmt::format("Invalid 'logit_bias': token id {} is outside the vocabulary "
                                  "(size {})",
                                  id, backend->vocab_size()),
                      "logit_bias");
      }
    }

    ChoiceOutputOptions options;
    options.stop = request.stop;
    options.parse_reasoning = request.api != ApiKind::kCompletions;
    options.starts_in_reasoning =
        options.parse_reasoning && text::prompt_opens_reasoning(prompt.text);
    bool tools_offered = request.tools.is_array() && request.tool_choice != ToolChoice::kNone &&
                         request.api != ApiKind::kCompletions;
    options.tool_format = tools_offered ? backend->tool_call_format() : text::ToolCallFormat::kNone;
    options.tool_id_prefix = request.api == ApiKind::kMessages ? "toolu_" : "call_";

    FormatContext fc;
    fc.model = backend->id();
    fc.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
    switch (request.api) {
      case ApiKind::kChatCompletions:
        fc.id = random_id("chatcmpl-");
        break;
      case ApiKind::kCompletions:
        fc.id = random_id("cmpl-");
        if (request.echo) fc.echo = prompt.text;
        break;
      case ApiKind::kMessages:
        fc.id = random_id("msg_");
        break;
      case ApiKind::kResponses:
        fc.id = random_id("resp_");
        break;
    }
    auto formatter = make_formatter(request, std::move(fc));
    metrics->requests_total.fetch_add(1);
    metrics->requests_active.fetch_add(1);
    auto job = std::make_shared<GenerationJob>(std::move(request), backend, exchange, metrics,
                                               std::move(formatter), options, n_prompt);
    Status started = job->start(prompt.ids, params);
    if (!started.ok()) {
      metrics->requests_active.fetch_sub(1);
      metrics->requests_failed.fetch_add(1);
      ApiError e = api_error_from_status(started);
      exchange->respond(render_error(e, flavor));
      return;
    }
    std::weak_ptr<GenerationJob> weak = job;
    exchange->on_cancel([weak] {
      if (auto j = weak.lock()) j->cancel_all();
    });
  } catch (const ApiException& e) {
    metrics->requests_failed.fetch_add(1);
    spdlog::info("generation request refused ({}): {}", e.error.status, e.error.message);
    exchange->respond(render_error(e.error, flavor));
  } catch (const std::exception& e) {
    metrics->requests_failed.fetch_add(1);
    ApiError err;
    err.status = 500;
    err.type = "api_error";
    err.message = std::string("internal error: ") + e.what();
    exchange->respond(render_error(err, flavor));
  }
}

}  // namespace hearth::server
