// A test double of the ModelBackend interface (not of any model): one byte = one token,
// a chat "template" that joins roles and contents, and a generation that replays a fixed
// reply one byte-token at a time on its own thread, honoring max_tokens and cancel. It lets
// the HTTP layer be tested without loading a model; the black-box tests use a real one.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "server/model_backend.h"

namespace hearth::server {

class ScriptBackend : public ModelBackend {
 public:
  explicit ScriptBackend(std::string reply, int token_delay_ms = 0, int context = 4096)
      : reply_(std::move(reply)), delay_ms_(token_delay_ms), context_(context) {}
  ~ScriptBackend() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, flag] : cancel_) flag->store(true);
      threads.swap(threads_);
    }
    // The last reference can drop on a generation thread (its sink owns the job that owns
    // this backend): that thread cannot join itself.
    for (auto& t : threads) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
      } else {
        t.join();
      }
    }
  }

  const std::string& id() const override { return id_; }
  int64_t created() const override { return 1700000000; }
  int context_length() const override { return context_; }
  int32_t vocab_size() const override { return 1 << 16; }
  text::ToolCallFormat tool_call_format() const override { return text::ToolCallFormat::kHermes; }
  bool has_chat_template() const override { return true; }

  Result<std::string> render_chat(const nlohmann::json& messages, const nlohmann::json&, bool,
                                  const nlohmann::json&) const override {
    std::string out;
    for (const auto& m : messages) {
      out += m["role"].get<std::string>() + ":" +
             (m["content"].is_string() ? m["content"].get<std::string>() : "") + "\n";
    }
    return out + "assistant:";
  }
  Result<std::vector<int32_t>> tokenize(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  Result<std::string> detokenize(std::span<const int32_t> ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s.push_back(static_cast<char>(id));
    return s;
  }

  Result<uint64_t> submit(std::vector<int32_t> prompt, const engine::SamplingParams& params,
                          std::shared_ptr<GenerationSink> sink) override {
    uint64_t id = next_id_++;
    auto flag = std::make_shared<std::atomic<bool>>(false);
    std::lock_guard lock(mu_);
    cancel_[id] = flag;
    submitted_.fetch_add(1);
    int n_prompt = static_cast<int>(prompt.size());
    threads_.emplace_back([this, flag, sink, params, n_prompt] {
      int produced = 0;
      FinishReason reason = FinishReason::kStop;
      for (char c : reply_) {
        if (flag->load()) {
          reason = FinishReason::kCancelled;
          break;
        }
        if (produced == params.max_tokens) {
          reason = FinishReason::kLength;
          break;
        }
        StreamToken t;
        t.id = static_cast<unsigned char>(c);
        t.text = std::string(1, c);
        if (params.logprobs >= 0) {
          engine::TokenLogprobs lp;
          lp.token = t.id;
          lp.logprob = -0.5f;
          for (int k = 0; k < params.logprobs; ++k) lp.top.push_back({'a' + k, -1.0f - k});
          t.logprobs = lp;
        }
        ++produced;
        sink->on_tokens({t});
        if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
      }
      if (flag->load() && reason == FinishReason::kStop) reason = FinishReason::kCancelled;
      if (reason == FinishReason::kCancelled) cancelled_.fetch_add(1);
      GenerationOutcome o;
      o.reason = reason;
      o.prompt_tokens = n_prompt;
      o.completion_tokens = produced;
      sink->on_finish(o);
    });
    return id;
  }
  void cancel(uint64_t id) override {
    std::lock_guard lock(mu_);
    if (auto it = cancel_.find(id); it != cancel_.end()) it->second->store(true);
  }
  nlohmann::json stats() const override { return {{"submitted", submitted_.load()}}; }

  std::atomic<int> submitted_{0};
  std::atomic<int> cancelled_{0};

 private:
  std::string id_ = "script-model";
  std::string reply_;
  int delay_ms_;
  int context_;
  std::atomic<uint64_t> next_id_{1};
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<std::atomic<bool>>> cancel_;
  std::vector<std::thread> threads_;
};

}  // namespace hearth::server
