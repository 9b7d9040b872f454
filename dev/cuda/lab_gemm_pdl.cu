// Lab (issue 6): can a cuBLASLt GEMM be a programmatic dependent of the kernel before it in a
// captured CUDA graph? cuBLASLt takes no launch attributes, but a stream capture's pending
// dependencies can be given programmatic edge data before the library launches
// (cudaStreamUpdateCaptureDependencies). That is safe only if the library's kernels wait
// (griddepcontrol.wait) before reading what the previous kernel writes. The race test: a
// writer that lets dependents launch at once, spins ~200 us, then writes x = 1; its consumer
// over a programmatic edge is a copy that never waits (the control: it must see the stale
// zeros, proving the edge took effect), a copy that waits (must see ones), then the cuBLASLt
// GEMM y = x · wᵀ (stale x gives zeros). The writer runs as 1 block and as one block per
// multiprocessor: cuBLASLt's Hopper kernels take a whole multiprocessor's registers, so beside
// a writer on every SM none can start early and the GEMM looks safe when it is not.
// Environment: LAB_M=<m> (default 64).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/pdl.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;

__global__ void slow_writer(Bf16* x, int n, long long spin_ns) {
  detail::launch_dependents();
  long long start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    long long now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > spin_ns) break;
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = __float2bfloat16(1.0f);
  }
}

template <bool kWait>
__global__ void copy_kernel(const Bf16* x, Bf16* y, int n) {
  if constexpr (kWait) detail::grid_dependency_wait();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = x[i];
  }
}

// Gives the capture's pending dependencies (the last captured kernel) programmatic edges, so
// the next captured kernel may launch once they trigger.
void make_next_programmatic(cudaStream_t st) {
  cudaStreamCaptureStatus status;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* data = nullptr;
  size_t count = 0;
  CK(cudaStreamGetCaptureInfo(st, &status, nullptr, nullptr, &deps, &data, &count));
  if (status != cudaStreamCaptureStatusActive) throw std::runtime_error("not capturing");
  std::vector<cudaGraphNode_t> nodes(deps, deps + count);
  std::vector<cudaGraphEdgeData> edges(count);
  for (auto& e : edges) {
    e = cudaGraphEdgeData{};
    e.from_port = cudaGraphKernelNodePortProgrammatic;
    e.type = cudaGraphDependencyTypeProgrammatic;
  }
  CK(cudaStreamUpdateCaptureDependencies(st, nodes.data(), edges.data(), count,
                                         cudaStreamSetCaptureDependencies));
}

size_t count_nonzero(const std::vector<Bf16>& v) {
  size_t c = 0;
  for (Bf16 b : v) c += __bfloat162float(b) != 0.0f ? 1 : 0;
  return c;
}

void run() {
  auto ctx_or = DeviceContext::create({});
  if (!ctx_or.ok()) throw std::runtime_error(ctx_or.status().to_string());
  auto& ctx = **ctx_or;
  cudaStream_t st = ctx.stream();
  const char* m_env = std::getenv("LAB_M");
  const int m = m_env != nullptr ? std::atoi(m_env) : 64;
  GemmBf16 gemm(ctx);

  // The o shape: y [m, 4096] = x [m, 4096] · w [4096, 4096]ᵀ.
  const int n = 4096, k = 4096;
  Bf16 *x, *y, *w;
  CK(cudaMalloc(&x, size_t(m) * k * 2));
  CK(cudaMalloc(&y, size_t(m) * n * 2));
  CK(cudaMalloc(&w, size_t(n) * k * 2));
  CK(fill_random_bf16(w, size_t(n) * k, 5, 0.05f, st));
  const int xn = m * k;
  const int sms = ctx.properties().multiProcessorCount;
  for (int writer_blocks : {1, sms}) {
    auto race = [&](const char* what, auto consumer, size_t out_elems) {
      CK(cudaMemsetAsync(x, 0, size_t(xn) * 2, st));
      CK(cudaMemsetAsync(y, 0, size_t(m) * n * 2, st));
      CK(cudaStreamSynchronize(st));
      CapturedGraph graph(st, [&] {
        slow_writer<<<writer_blocks, 256, 0, st>>>(x, xn, 200000);
        make_next_programmatic(st);
        consumer();
      });
      graph.launch();
      CK(cudaStreamSynchronize(st));
      std::vector<Bf16> out(out_elems);
      CK(cudaMemcpy(out.data(), y, out_elems * 2, cudaMemcpyDeviceToHost));
      std::printf("race, writer of %3d blocks: %-28s %zu of %zu outputs saw the writer's x\n",
                  writer_blocks, what, count_nonzero(out), out_elems);
    };
    race(
        "copy without wait (control)", [&] { copy_kernel<false><<<sms, 256, 0, st>>>(x, y, xn); },
        size_t(xn));
    race(
        "copy with wait", [&] { copy_kernel<true><<<sms, 256, 0, st>>>(x, y, xn); }, size_t(xn));
    race(
        "cuBLASLt GEMM",
        [&] {
          CK(gemm.run({m, n, k, k, k, n, GemmOut::kBf16, false}, x, w, y));
        },
        size_t(m) * n);
  }
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaFree(w));
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  try {
    hearth::cuda::dev::run();
  } catch (const std::exception& e) {
    std::printf("lab_gemm_pdl: ERROR %s\n", e.what());
    return 1;
  }
  return 0;
}
