// ThreadPool implementation: a generation counter publishes each job, chunks are claimed by
// CAS on (generation, index), and both idle workers and a waiting caller spin briefly before
// sleeping on futexes.
#include "kernels/cpu/thread_pool.h"

#include <cblas.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace hearth::kernels::cpu {
namespace {

// How long an idle thread polls before it sleeps: long enough to catch the next kernel of a
// decode step (microseconds apart), short enough not to steal a loaded machine's cores.
constexpr auto kSpin = std::chrono::microseconds(50);
// Chunks per thread: some slack so that a slow or descheduled thread's share is taken by
// the others, few enough that claiming stays cheap.
constexpr int64_t kChunksPerThread = 4;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Polls `ready` for up to kSpin; true when it became true.
template <typename Ready>
bool spin_until(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

// Raw futexes, paired with a sleeper count / flag so that the common path (nobody asleep)
// makes no system call.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

CpuContext::CpuContext(int threads) : pool(threads) {
  // OpenBLAS runs single-threaded inside the pool's chunks (kernels/cpu/ops.cpp), so the
  // pool's size is the only thread count in play and its threads never compete with
  // OpenBLAS's own.
  openblas_set_num_threads(1);
  const char* core = openblas_get_corename();
  blas_core = core != nullptr ? core : "";
  const char* gemm = std::getenv("HEARTH_CPU_PREFILL_GEMM");
  hearth_prefill_gemm = gemm == nullptr || std::strcmp(gemm, "blas") != 0;
}

ThreadPool::ThreadPool(int threads) {
  num_threads_ = threads > 0 ? threads : available_cores();
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(generation_);
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint32_t generation) {
  uint64_t cur = next_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(cur >> 32) != generation) return;  // a later job
    const int chunks = static_cast<int>((cur >> 16) & 0xffff);
    const int index = static_cast<int>(cur & 0xffff);
    if (index >= chunks) return;
    if (!next_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      continue;  // cur reloaded
    }
    // A successful claim of an unfinished chunk means the caller is still waiting for this
    // job, so the job fields below are this job's.
    const int64_t begin = index * job_chunk_;
    const int64_t end = std::min(job_n_, begin + job_chunk_);
    (*job_)(begin, end);
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == static_cast<uint32_t>(chunks) &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      futex_wake_all(done_);
    }
    cur = next_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  // Generation 0 is the pool's birth, not the value at thread start: a worker that starts
  // late must still see jobs and a shutdown published before it ran.
  uint32_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      // Announce the sleep, then re-check: a publisher bumps generation_ before it reads
      // sleepers_ (both seq_cst), so one of the two sides sees the other.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (generation_.load(std::memory_order_seq_cst) == seen) futex_wait(generation_, seen);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    run_chunks(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t max_chunks =
      num_threads_ == 1 ? 1 : std::min<int64_t>(num_threads_ * kChunksPerThread, 0xffff);
  const int chunks = static_cast<int>(std::min(units, max_chunks));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t units_per_chunk = (units + chunks - 1) / chunks;
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = units_per_chunk * grain;
  const int total = static_cast<int>((n + job_chunk_ - 1) / job_chunk_);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  next_.store((static_cast<uint64_t>(generation) << 32) | (static_cast<uint64_t>(total) << 16),
              std::memory_order_release);
  generation_.store(generation, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(generation_);
  run_chunks(generation);
  // Wait for chunks other threads claimed; they are running, so a short spin usually does.
  const auto all_done = static_cast<uint32_t>(total);
  if (!spin_until([&] { return done_.load(std::memory_order_acquire) == all_done; })) {
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    for (uint32_t d = done_.load(std::memory_order_seq_cst); d != all_done;
         d = done_.load(std::memory_order_seq_cst)) {
      futex_wait(done_, d);
    }
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
}

}  // namespace hearth::kernels::cpu
