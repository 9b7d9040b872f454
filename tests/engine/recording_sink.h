// RecordingSink: a RequestSink that keeps what it was sent and lets a test thread wait for
// the finish.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/request.h"

namespace hearth::engine::testing {

class RecordingSink : public RequestSink {
 public:
  void on_tokens(std::span<const int32_t> tokens,
                 std::span<const TokenLogprobs> logprobs) override {
    std::lock_guard lock(mutex_);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
    if (finish_) ++calls_after_finish_;
  }
  void on_finish(const FinishInfo& info) override {
    {
      std::lock_guard lock(mutex_);
      ++finish_calls_;
      finish_ = info;
    }
    done_.notify_all();
  }

  FinishInfo wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finish_.has_value(); });
    return *finish_;
  }
  std::vector<int32_t> tokens() const {
    std::lock_guard lock(mutex_);
    return tokens_;
  }
  std::vector<TokenLogprobs> logprobs() const {
    std::lock_guard lock(mutex_);
    return logprobs_;
  }
  std::optional<FinishInfo> finish() const {
    std::lock_guard lock(mutex_);
    return finish_;
  }
  int finish_calls() const {
    std::lock_guard lock(mutex_);
    return finish_calls_;
  }
  int calls_after_finish() const {
    std::lock_guard lock(mutex_);
    return calls_after_finish_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprobs> logprobs_;
  std::optional<FinishInfo> finish_;
  int finish_calls_ = 0;
  int calls_after_finish_ = 0;
};

}  // namespace hearth::engine::testing
