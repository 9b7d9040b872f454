// DeviceContext: what CUDA work needs besides tensors — the stream, the cuBLASLt handle and
// its workspace, and the one allocator that keeps device memory under a budget. No globals:
// each model owns one context; buffers it hands out must not outlive it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace hearth::cuda {

// Converts a CUDA runtime error into a Status naming what was being done.
Status cuda_status(cudaError_t err, std::string_view what);
// Converts a cuBLAS(Lt) error into a Status naming what was being done.
Status cublas_status(cublasStatus_t err, std::string_view what);

class DeviceContext;

// A device allocation charged to a DeviceContext's budget; freed (and uncharged) on
// destruction. Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  friend class DeviceContext;
  DeviceBuffer(DeviceContext* owner, void* data, size_t size)
      : owner_(owner), data_(data), size_(size) {}
  void reset();

  DeviceContext* owner_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

struct DeviceContextOptions {
  int device = 0;
  // Bytes this context may allocate in total; 0 means the device's free memory at creation
  // minus kReservedBytes (left for the CUDA runtime, cuBLASLt and graphs).
  size_t memory_budget = 0;
  size_t workspace_bytes = size_t{64} << 20;  // cuBLASLt workspace
};

// One host range (pageable or memory-mapped) to copy into device memory.
struct UploadJob {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

struct UploadOptions {
  int threads = 0;  // 0: min(8, hardware threads)
  // Per pinned staging buffer (two per thread). Small: pinning fresh host memory ran at
  // ~2.1 GB/s on the H200 VM (cudaMallocHost of 1 GiB: 477 ms), while 4 MiB DMAs already
  // reach the link's rate (55 GB/s from pinned memory).
  size_t chunk_bytes = size_t{4} << 20;
  // Called from the worker threads after each chunk with the bytes done so far.
  std::function<void(size_t done, size_t total)> progress;
};

class DeviceContext {
 public:
  static constexpr size_t kReservedBytes = size_t{1} << 30;

  // Selects the device, creates a non-blocking stream, the cuBLASLt handle and workspace.
  // Fails (never aborts) when no device is present or the budget cannot hold the workspace.
  static Result<std::unique_ptr<DeviceContext>> create(const DeviceContextOptions& options);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Allocates `bytes` (rounded up to 256) of device memory; an out-of-memory Status naming
  // `what` when the budget or the device cannot hold it.
  Result<DeviceBuffer> allocate(size_t bytes, std::string_view what);

  // Blocks until the stream's work is done; reports any asynchronous kernel error.
  Status synchronize();
  // Makes this context's device the calling thread's current device (a thread other than
  // the creating one must call it before launching work).
  Status make_current() const;

  // Copies every job to the device and waits for it: worker threads copy chunks of the
  // sources into their own two pinned staging buffers and queue async copies on their own
  // streams, so page faults on mapped files, host copies and DMA overlap (one pageable
  // cudaMemcpy per tensor does all three in series). Independent of stream().
  Status upload(const std::vector<UploadJob>& jobs, const UploadOptions& options);

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  void* workspace() const { return workspace_.data(); }
  size_t workspace_size() const { return workspace_.size(); }
  const cudaDeviceProp& properties() const { return properties_; }

  size_t budget() const { return budget_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }

 private:
  friend class DeviceBuffer;
  DeviceContext() = default;
  void release(void* data, size_t bytes);

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudaDeviceProp properties_{};
  size_t budget_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  DeviceBuffer workspace_;
};

}  // namespace hearth::cuda
