// ThreadPool: the fixed set of worker threads the CPU kernels split work over. One pool
// lives in an explicit CpuContext (never a global, never a thread per call). Chunks are
// claimed dynamically, the calling thread included, so a worker the OS has not scheduled
// (an oversubscribed machine) delays nothing: the caller takes its share. Idle workers spin
// for a few microseconds (back-to-back decode kernels) and then sleep on a futex.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
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

  // Calls fn(begin, end) over [0, n) split into contiguous chunks whose boundaries are
  // multiples of `grain` (except the last); returns when all are done. Runs inline when
  // there is a single chunk. Not reentrant: fn must not call parallel_for.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  // Claims and runs chunks of the job published as `generation` until none are left.
  void run_chunks(uint32_t generation);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  // Bumped to publish a job (and on shutdown); workers sleep on it.
  std::atomic<uint32_t> generation_{0};
  // generation << 32 | chunks << 16 | next chunk index: a claim is a CAS, which fails for a
  // stale job, and no job field is read before a claim succeeds.
  std::atomic<uint64_t> next_{0};
  std::atomic<uint32_t> done_{0};             // chunks finished in the current job
  std::atomic<int> sleepers_{0};              // workers asleep (or about to be) on generation_
  std::atomic<bool> caller_sleeping_{false};  // the caller is asleep on done_
  std::atomic<bool> stop_{false};
  // The current job, written before generation_ / next_ publish it.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 1;  // elements per chunk (a multiple of the grain)
};

// The CPU backend's context: its thread pool, owned by whoever runs the model, and what
// OpenBLAS chose for this CPU.
struct CpuContext {
  explicit CpuContext(int threads);
  ThreadPool pool;
  // OpenBLAS's kernel family (openblas_get_corename; the levers line names it). A CPU newer
  // than the library knows gets its generic SSE3 "Prescott" kernels (Debian 12's 0.3.21 on
  // Emerald Rapids), 1.5-2x slower than hearth's own AVX-512 kernels.
  std::string blas_core;
  // Prefill (5+ rows) runs hearth's cache-blocked AVX-512 GEMM (AVX-512 builds) instead of
  // OpenBLAS sgemm: float weights (faster than OpenBLAS's SkylakeX kernels on both CPUs
  // measured, benchmarks/RESULTS.md, S25-R4) and quantized ones off the int8 path, their weight
  // slices dequantized as they are packed (faster than OpenBLAS and than the dequantized-panel
  // kernels at 128-1,024 rows on the VM, session 26). HEARTH_CPU_PREFILL_GEMM=blas: OpenBLAS for
  // both (quantized weights over dequantized tiles).
  bool hearth_prefill_gemm = true;
  // Quantized weights multiply int8-quantized activations with integer dot products
  // (int8_dot.h) where the CPU has them; off: f32 activations against dequantized weights.
  bool int8_dot = false;
  // bf16 weights in prefill multiply activations rounded to bf16 with AVX512-BF16 dot products
  // (bf16_dot.h) where the CPU has them; off: f32 activations against f32-converted weights.
  bool bf16_dot = false;
  // Batch-invariant (--batch-invariant): a row's sums must not depend on how many rows share
  // the call, so linear layers that the int8 path does not take run every row count in one
  // order (the mat-vec for 1-4 rows and the cache-blocked GEMM for 16+ sum in other orders):
  // float weights the GEMM's (gemm_dense.h, dense_gemm_rows), quantized ones 4 x 4
  // dot-product tiles.
  bool batch_invariant = false;
};

// The number of cores this process may run on (sched_getaffinity), at least 1.
int available_cores();

}  // namespace hearth::kernels::cpu
