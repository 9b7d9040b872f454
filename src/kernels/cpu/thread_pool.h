// ThreadPool: the fixed set of worker threads the CPU kernels split work over. One pool
// lives in an explicit CpuContext (never a global, never a thread per call); the calling
// thread takes a share of every parallel_for, and workers spin briefly before sleeping
// so back-to-back decode kernels do not pay a wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth::kernels::cpu {

class ThreadPool {
 public:
  // threads <= 0: every core this process may run on.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Calls fn(begin, end) over [0, n) split into at most size() contiguous chunks whose
  // boundaries are multiples of `grain` (except the last); returns when all are done.
  // Not reentrant: fn must not call parallel_for.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_chunk(int index);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // The job of the current generation.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  int job_chunks_ = 0;
};

// The CPU backend's context: its thread pool, owned by whoever runs the model.
struct CpuContext {
  explicit CpuContext(int threads) : pool(threads) {}
  ThreadPool pool;
};

// The number of cores this process may run on (sched_getaffinity), at least 1.
int available_cores();

}  // namespace hearth::kernels::cpu
