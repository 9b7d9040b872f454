// Kernel-lab helper: the read-only streaming ceiling (lab.h, measure_read_bandwidth).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "dev/cuda/lab.h"

namespace hearth::cuda::dev {
namespace {

// Every thread folds 16-byte loads (four in flight) over a buffer it never writes; one word
// is stored only if the fold hits a magic value.
__global__ void __launch_bounds__(512) read_kernel(const uint4* data, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint4* ptr = data + i + u * stride;
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(ptr));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= data[i].x;
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

}  // namespace

double measure_read_bandwidth(cudaStream_t st, int sms) {
  const size_t bytes = size_t{4} << 30;
  uint4* data = nullptr;
  unsigned* sink = nullptr;
  CK(cudaMalloc(&data, bytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemsetAsync(data, 1, bytes, st));
  const double ms =
      median_ms(st, [&](int) { read_kernel<<<sms * 4, 512, 0, st>>>(data, bytes / 16, sink); });
  CK(cudaFree(data));
  CK(cudaFree(sink));
  const double bw = bytes / (ms * 1e-3);
  std::printf("read-only 4 GiB: %.3f ms -> %.3f TB/s\n", ms, bw / 1e12);
  return bw;
}

}  // namespace hearth::cuda::dev
