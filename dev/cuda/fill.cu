// Seeded fills for the kernel lab (a counter-based hash, so any element is reproducible).
#include "dev/cuda/fill.cuh"

namespace hearth::cuda::dev {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fill_bf16_kernel(__nv_bfloat16* data, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float u = static_cast<float>(mix(seed ^ (i * 0x632BE59BD9B4E019ull)) >> 40) / 16777216.0f;
    data[i] = __float2bfloat16((2.0f * u - 1.0f) * scale);
  }
}

__global__ void fill_u32_kernel(uint32_t* data, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = static_cast<uint32_t>(mix(seed ^ (i * 0x632BE59BD9B4E019ull)));
  }
}

}  // namespace

cudaError_t fill_random_bf16(__nv_bfloat16* data, size_t n, uint64_t seed, float scale,
                             cudaStream_t stream) {
  fill_bf16_kernel<<<1024, 256, 0, stream>>>(data, n, seed, scale);
  return cudaGetLastError();
}

cudaError_t fill_random_u32(uint32_t* data, size_t n, uint64_t seed, cudaStream_t stream) {
  fill_u32_kernel<<<1024, 256, 0, stream>>>(data, n, seed);
  return cudaGetLastError();
}

}  // namespace hearth::cuda::dev
