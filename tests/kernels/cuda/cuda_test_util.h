// Shared helpers for the CUDA kernel tests: a DeviceContext per test, host<->device copies,
// bf16 rounding on the host, seeded random data and the relative-error measure.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/device_context.h"

namespace hearth::cuda::testing {

inline float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// Normal(0, stddev) values already rounded to bf16, so host and device see the same inputs.
inline std::vector<float> random_bf16_values(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16(dist(rng));
  return v;
}

// ||out - ref|| / ||ref|| over the elements where mask is true (all when empty).
inline double relative_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0.0;
  double den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ y0 when y0 is given) in float64, from the bf16 values as
// floats, with row strides ldx, ldw and ldy (y0's); the result is dense [m, n].
inline std::vector<double> reference_gemm(const std::vector<float>& x, int64_t ldx,
                                          const std::vector<float>& w, int64_t ldw, int m, int n,
                                          int k, const std::vector<float>* y0 = nullptr,
                                          int64_t ldy = 0) {
  std::vector<double> ref(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = y0 != nullptr ? (*y0)[i * ldy + j] : 0.0;
      for (int p = 0; p < k; ++p) acc += static_cast<double>(x[i * ldx + p]) * w[j * ldw + p];
      ref[static_cast<size_t>(i) * n + j] = acc;
    }
  }
  return ref;
}

// A random GEMM problem y (+)= x · wᵀ with padded row strides: x [m, ldx], w [n, ldw] (scale
// 0.05), the prior y0 [m, ldy] and the float64 reference (y0 added when accumulate). Seeds
// seed, seed + 1, seed + 2.
struct GemmProblem {
  int64_t ldx, ldw, ldy;
  std::vector<float> x, w, y0;
  std::vector<double> ref;
};
inline GemmProblem gemm_problem(int m, int n, int k, int pad_x, int pad_w, int pad_y,
                                bool accumulate, uint32_t seed) {
  GemmProblem p;
  p.ldx = k + pad_x;
  p.ldw = k + pad_w;
  p.ldy = n + pad_y;
  p.x = random_bf16_values(m * p.ldx, seed);
  p.w = random_bf16_values(n * p.ldw, seed + 1, 0.05f);
  p.y0 = random_bf16_values(m * p.ldy, seed + 2);
  p.ref = reference_gemm(p.x, p.ldx, p.w, p.ldw, m, n, k, accumulate ? &p.y0 : nullptr, p.ldy);
  return p;
}

// Rows [0, m) x columns [0, n) of a row-major matrix with row stride ld, packed [m, n].
inline std::vector<float> packed_rows(const std::vector<float>& y, int m, int n, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) out[static_cast<size_t>(i) * n + j] = y[i * ld + j];
  }
  return out;
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = DeviceContext::create({});
    ASSERT_TRUE(ctx.ok()) << "no usable CUDA device: " << ctx.status().to_string();
    ctx_ = std::move(ctx).value();
  }

  template <typename T>
  DeviceBuffer upload(const std::vector<T>& host) {
    auto buf = ctx_->allocate(host.size() * sizeof(T) + 16, "test input");
    EXPECT_TRUE(buf.ok()) << buf.status().to_string();
    EXPECT_EQ(cudaMemcpy(buf->data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    // From pageable memory the copy may still be in flight on the legacy stream, which the
    // context's non-blocking stream does not wait for.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return std::move(buf).value();
  }

  // A device buffer of n T's filled with 0xff bytes (NaN for floats) so unwritten outputs
  // show up.
  template <typename T>
  DeviceBuffer poisoned(size_t n) {
    auto buf = ctx_->allocate(n * sizeof(T) + 16, "test output");
    EXPECT_TRUE(buf.ok()) << buf.status().to_string();
    EXPECT_EQ(cudaMemset(buf->data(), 0xff, n * sizeof(T)), cudaSuccess);
    // cudaMemset may return before it is done, and the context's non-blocking stream does not
    // wait for the legacy stream: a late poison once overwrote a kernel's output (S17-W4).
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return std::move(buf).value();
  }

  template <typename T>
  std::vector<T> download(const DeviceBuffer& buf, size_t n) {
    EXPECT_TRUE(ctx_->synchronize().ok());
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), buf.data(), n * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

  int sm_count() const { return ctx_->properties().multiProcessorCount; }

  std::unique_ptr<DeviceContext> ctx_;
};

}  // namespace hearth::cuda::testing
