// Kernel-lab helpers shared by dev/cuda's benchmarks: error checks that throw, a median
// CUDA-event timer, and the device-to-device copy bandwidth (the decode ceiling) measured in
// the same process as the kernel it is compared with.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/status.h"
#include "dev/cuda/fill.cuh"
#include "kernels/cuda/device_context.h"

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

// Microseconds per call of fn(i) over `calls` calls captured into one graph (median of
// `reps` replays).
template <typename F>
double graph_us(cudaStream_t st, int calls, F&& fn, int reps = 9) {
  const CapturedGraph graph(st, [&] {
    for (int i = 0; i < calls; ++i) fn(i);
  });
  return median_ms(
             st, [&](int) { graph.launch(); }, reps, 2) *
         1e3 / calls;
}

// The Llama-3.1-8B weight shapes a decode step multiplies by, as w[n, k].
struct WeightShape {
  const char* name;
  int n;
  int k;
};
constexpr WeightShape kLlama8bShapes[] = {{"qkv", 6144, 4096},
                                          {"o", 4096, 4096},
                                          {"gate_up", 28672, 4096},
                                          {"down", 4096, 14336},
                                          {"lm_head", 128256, 4096}};

// Distinct random copies of one weight shape (seed 100 + n, scale 0.05), enough of them (at
// least 2, over 256 MB in all) that calls rotating through copy(i) read every weight from DRAM
// rather than the 60 MB L2; freed with the object.
struct RotatedWeights {
  size_t bytes;  // one copy
  int copies;
  int calls;                   // calls a timed graph: at least 8, every copy twice
  __nv_bfloat16* w = nullptr;  // copy 0, the others after it
  RotatedWeights(const WeightShape& s, cudaStream_t st)
      : bytes(size_t(s.n) * s.k * 2),
        copies(static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / bytes + 1))),
        calls(std::max(8, 2 * copies)) {
    CK(cudaMalloc(&w, bytes * copies));
    CK(fill_random_bf16(w, size_t(s.n) * s.k * copies, 100 + s.n, 0.05f, st));
  }
  ~RotatedWeights() { cudaFree(w); }
  RotatedWeights(const RotatedWeights&) = delete;
  RotatedWeights& operator=(const RotatedWeights&) = delete;
  __nv_bfloat16* copy(int i) const { return w + size_t(i % copies) * (bytes / 2); }
};

// kLayers layers of the 8B's four layer weights (kLlama8bShapes[0..3]: qkv, o, gate_up, down),
// each a distinct random copy (seed 300 + 4 * layer + shape), for layer chains that must read
// every weight from DRAM; freed with the object.
struct LayerWeights {
  static constexpr int kLayers = 8;
  std::vector<__nv_bfloat16*> w = std::vector<__nv_bfloat16*>(4 * kLayers, nullptr);
  size_t layer_bytes = 0;  // the four weights of one layer
  explicit LayerWeights(cudaStream_t st) {
    for (int i = 0; i < 4; ++i)
      layer_bytes += size_t(kLlama8bShapes[i].n) * kLlama8bShapes[i].k * 2;
    for (int l = 0; l < kLayers; ++l) {
      for (int i = 0; i < 4; ++i) {
        const size_t n = size_t(kLlama8bShapes[i].n) * kLlama8bShapes[i].k;
        CK(cudaMalloc(&w[l * 4 + i], n * 2));
        CK(fill_random_bf16(w[l * 4 + i], n, 300 + l * 4 + i, 0.05f, st));
      }
    }
  }
  ~LayerWeights() {
    for (__nv_bfloat16* p : w) cudaFree(p);
  }
  LayerWeights(const LayerWeights&) = delete;
  LayerWeights& operator=(const LayerWeights&) = delete;
  const __nv_bfloat16* at(int layer, int shape) const { return w[layer * 4 + shape]; }
};

// fn(shape) for each of kLlama8bShapes, or LAB_ONLY=<name>'s alone; a shape that throws is
// reported and the next one runs.
template <typename F>
void for_each_llama8b_shape(F&& fn) {
  const char* only = std::getenv("LAB_ONLY");
  for (const WeightShape& s : kLlama8bShapes) {
    if (only != nullptr && std::strcmp(only, s.name) != 0) continue;
    try {
      fn(s);
    } catch (const std::exception& e) {
      std::printf("%s: ERROR %s\n", s.name, e.what());
    }
  }
}

// A lab's main(): body(ctx) on a fresh DeviceContext of device 0, with what it throws (a
// failed context included) reported as "<lab>: ERROR ..." and exit 1.
template <typename F>
int run_reported(const char* lab, F&& body) {
  try {
    auto ctx = DeviceContext::create({});
    check(ctx.status(), "device context");
    body(**ctx);
  } catch (const std::exception& e) {
    std::printf("%s: ERROR %s\n", lab, e.what());
    return 1;
  }
  return 0;
}

inline std::vector<float> to_host_bf16(const __nv_bfloat16* d, size_t count) {
  std::vector<__nv_bfloat16> h(count);
  CK(cudaMemcpy(h.data(), d, count * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

inline std::vector<float> to_host_f32(const float* d, size_t count) {
  std::vector<float> f(count);
  CK(cudaMemcpy(f.data(), d, count * 4, cudaMemcpyDeviceToHost));
  return f;
}

// Worst |a - ref| in units of the allowed error: one bf16 rounding of |ref| (2^-7 relative,
// bf16 outputs) or 1e-5 relative (f32), plus an absolute floor. <= 1 passes. With
// accumulate the floor is one rounding of the product's magnitude (~1): W1 showed cuBLASLt's
// beta = 1 results up to 3.7x the plain floor from the skinny GEMM's where y + x·wᵀ cancels,
// while both pass the float64 gtests — the reference, not the kernel, rounds there.
inline double check_ratio(const std::vector<float>& got, const std::vector<float>& ref, bool f32,
                          bool accumulate = false) {
  double worst = 0;
  const double floor = f32 ? (accumulate ? 1e-4 : 1e-5) : (accumulate ? 1.0 / 64 : 1e-3);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = (f32 ? 1e-5 : 1.0 / 128) * std::fabs(ref[i]) + floor;
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol * 1e6)) return 1e9;  // NaN or garbage
    worst = std::max(worst, err / tol);
  }
  return worst;
}

// Read-only stream of 4 GiB (16-byte ld.global.nc, sms x 4 blocks of 512), bytes read per
// second: 6-9 % above the copy on the H200. Defined in dev/cuda/read_bandwidth.cu.
double measure_read_bandwidth(cudaStream_t stream, int sms);

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
