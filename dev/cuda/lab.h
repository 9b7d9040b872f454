// Kernel-lab helpers shared by dev/cuda's benchmarks: error checks that throw, a median
// CUDA-event timer, and the device-to-device copy bandwidth (the decode ceiling) measured in
// the same process as the kernel it is compared with.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::cuda::dev {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}
inline void check(const Status& status, const char* what) {
  if (!status.ok()) throw std::runtime_error(std::string(what) + ": " + status.to_string());
}
#define CK(expr) ::hearth::cuda::dev::check((expr), #expr)

// Median over `reps` timed calls of fn(i) after `warmup` untimed ones; i counts all calls so
// callers can rotate buffers (to defeat the 60 MB L2).
template <typename F>
double median_ms(cudaStream_t stream, F&& fn, int reps = 20, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn(i);
  CK(cudaStreamSynchronize(stream));
  cudaEvent_t start;
  cudaEvent_t stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(start, stream));
    fn(warmup + i);
    CK(cudaEventRecord(stop, stream));
    CK(cudaEventSynchronize(stop));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  CK(cudaGetLastError());
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The work body() queues on stream, captured (thread-local mode) into an instantiated graph;
// launch() replays it on that stream.
class CapturedGraph {
 public:
  template <typename F>
  CapturedGraph(cudaStream_t stream, F&& body) : stream_(stream) {
    cudaGraph_t graph = nullptr;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    body();
    CK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t inst = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    CK(inst);
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void launch() const { CK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_;
  cudaGraphExec_t exec_ = nullptr;
};

// Device-to-device copy of 2 GiB, bytes read + written per second.
inline double measure_copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{2} << 30;
  void* a = nullptr;
  void* b = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemsetAsync(a, 1, bytes, stream));
  double ms = median_ms(
      stream, [&](int) { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); });
  CK(cudaFree(a));
  CK(cudaFree(b));
  double bw = 2.0 * bytes / (ms * 1e-3);
  std::printf("copy D2D 2 GiB: %.3f ms  -> %.3f TB/s (read + write)\n", ms, bw / 1e12);
  return bw;
}

}  // namespace hearth::cuda::dev
