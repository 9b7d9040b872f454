// DeviceContext: stream, cuBLASLt handle, workspace and the budgeted device allocator.
// Host-only code (compiled by the C++ compiler) so it can speak Status.
#include "kernels/cuda/device_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace hearth::cuda {

Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return ok_status();
  ErrorCode code =
      err == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kInternal;
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    code = ErrorCode::kUnavailable;
  }
  if (err == cudaErrorInvalidValue) code = ErrorCode::kInvalidArgument;
  return Status(code, fmt::format("{}: CUDA error {} ({})", what, cudaGetErrorName(err),
                                  cudaGetErrorString(err)));
}

Status cublas_status(cublasStatus_t err, std::string_view what) {
  if (err == CUBLAS_STATUS_SUCCESS) return ok_status();
  ErrorCode code = err == CUBLAS_STATUS_ALLOC_FAILED    ? ErrorCode::kOutOfMemory
                   : err == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorCode::kUnsupported
                   : err == CUBLAS_STATUS_INVALID_VALUE ? ErrorCode::kInvalidArgument
                                                        : ErrorCode::kInternal;
  return Status(code, fmt::format("{}: cuBLAS error {} ({})", what, static_cast<int>(err),
                                  cublasLtGetStatusString(err)));
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->release(data_, size_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

Result<std::unique_ptr<DeviceContext>> DeviceContext::create(const DeviceContextOptions& options) {
  int count = 0;
  HEARTH_RETURN_IF_ERROR(cuda_status(cudaGetDeviceCount(&count), "counting CUDA devices"));
  if (options.device < 0 || options.device >= count) {
    return invalid_argument_error("CUDA device {} does not exist ({} present)", options.device,
                                  count);
  }
  std::unique_ptr<DeviceContext> ctx(new DeviceContext());
  ctx->device_ = options.device;
  HEARTH_RETURN_IF_ERROR(cuda_status(cudaSetDevice(options.device), "selecting CUDA device"));
  HEARTH_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&ctx->properties_, options.device),
                                     "reading device properties"));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  HEARTH_RETURN_IF_ERROR(
      cuda_status(cudaMemGetInfo(&free_bytes, &total_bytes), "reading device memory"));
  size_t available = free_bytes > kReservedBytes ? free_bytes - kReservedBytes : 0;
  ctx->budget_ = options.memory_budget == 0 ? available : options.memory_budget;
  HEARTH_RETURN_IF_ERROR(cuda_status(
      cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking), "creating CUDA stream"));
  HEARTH_RETURN_IF_ERROR(cublas_status(cublasLtCreate(&ctx->cublaslt_), "creating cuBLASLt"));
  if (options.workspace_bytes > 0) {
    HEARTH_ASSIGN_OR_RETURN(ctx->workspace_,
                            ctx->allocate(options.workspace_bytes, "cuBLASLt workspace"));
  }
  return ctx;
}

DeviceContext::~DeviceContext() {
  workspace_ = DeviceBuffer();
  if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Result<DeviceBuffer> DeviceContext::allocate(size_t bytes, std::string_view what) {
  size_t rounded = (bytes + 255) / 256 * 256;
  if (rounded == 0) rounded = 256;
  if (used_ + rounded > budget_) {
    return out_of_memory_error(
        "{}: needs {:.1f} MiB of device memory but only {:.1f} MiB of the {:.1f} MiB budget "
        "is left (raise --memory-budget or use a smaller model/context)",
        what, rounded / 1048576.0, (budget_ - used_) / 1048576.0, budget_ / 1048576.0);
  }
  void* data = nullptr;
  cudaError_t err = cudaMalloc(&data, rounded);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    return cuda_status(
        err, fmt::format("{}: allocating {:.1f} MiB on the device", what, rounded / 1048576.0));
  }
  used_ += rounded;
  if (used_ > peak_) peak_ = used_;
  return DeviceBuffer(this, data, rounded);
}

void DeviceContext::release(void* data, size_t bytes) {
  cudaFree(data);
  used_ -= bytes;
}

Status DeviceContext::make_current() const {
  return cuda_status(cudaSetDevice(device_), "selecting the CUDA device");
}

Status DeviceContext::synchronize() {
  HEARTH_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "waiting for the stream"));
  return cuda_status(cudaGetLastError(), "checking kernel launches");
}

namespace {

struct Chunk {
  char* dst;
  const char* src;
  size_t bytes;
};

// One upload worker's pinned double buffer, stream and events; frees them on destruction.
class Stager {
 public:
  ~Stager() {
    for (int b = 0; b < 2; ++b) {
      if (done_[b] != nullptr) cudaEventDestroy(done_[b]);
      if (buf_[b] != nullptr) cudaFreeHost(buf_[b]);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status init(int device, size_t chunk_bytes) {
    HEARTH_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "selecting the upload device"));
    HEARTH_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                       "creating an upload stream"));
    for (int b = 0; b < 2; ++b) {
      HEARTH_RETURN_IF_ERROR(
          cuda_status(cudaMallocHost(&buf_[b], chunk_bytes), "allocating pinned staging"));
      HEARTH_RETURN_IF_ERROR(cuda_status(
          cudaEventCreateWithFlags(&done_[b], cudaEventDisableTiming), "creating an event"));
    }
    return ok_status();
  }

  // Waits for this buffer's previous copy, fills it, queues its DMA.
  Status copy(const Chunk& c) {
    if (used_[next_]) {
      HEARTH_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(done_[next_]), "uploading"));
    }
    std::memcpy(buf_[next_], c.src, c.bytes);
    HEARTH_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(c.dst, buf_[next_], c.bytes, cudaMemcpyHostToDevice, stream_),
                    "uploading weights"));
    HEARTH_RETURN_IF_ERROR(cuda_status(cudaEventRecord(done_[next_], stream_), "uploading"));
    used_[next_] = true;
    next_ ^= 1;
    return ok_status();
  }

  Status finish() { return cuda_status(cudaStreamSynchronize(stream_), "finishing the upload"); }

 private:
  cudaStream_t stream_ = nullptr;
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  bool used_[2] = {false, false};
  int next_ = 0;
};

}  // namespace

Status DeviceContext::upload(const std::vector<UploadJob>& jobs, const UploadOptions& options) {
  const size_t chunk_bytes = std::max<size_t>(options.chunk_bytes, 4096);
  std::vector<Chunk> chunks;
  size_t total = 0;
  for (const UploadJob& j : jobs) {
    for (size_t off = 0; off < j.bytes; off += chunk_bytes) {
      chunks.push_back({static_cast<char*>(j.dst) + off, static_cast<const char*>(j.src) + off,
                        std::min(chunk_bytes, j.bytes - off)});
    }
    total += j.bytes;
  }
  if (chunks.empty()) return ok_status();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = options.threads > 0 ? options.threads : std::min(8, hw);
  threads = std::min<int>(threads, static_cast<int>(chunks.size()));

  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status first_error;
  auto fail = [&](Status st) {
    std::lock_guard lock(error_mutex);
    if (first_error.ok()) first_error = std::move(st);
    failed = true;
  };
  auto work = [&] {
    Stager stager;
    // Without pinned memory (a host that refuses to pin more) this worker copies pageable.
    const bool pinned = stager.init(device_, chunk_bytes).ok();
    if (!pinned) cudaGetLastError();
    for (size_t i = next++; i < chunks.size() && !failed; i = next++) {
      const Chunk& c = chunks[i];
      Status st = pinned ? stager.copy(c)
                         : cuda_status(cudaMemcpy(c.dst, c.src, c.bytes, cudaMemcpyHostToDevice),
                                       "uploading weights");
      if (!st.ok()) return fail(std::move(st));
      const size_t now = done += chunks[i].bytes;
      if (options.progress) options.progress(now, total);
    }
    if (Status st = stager.finish(); !st.ok()) fail(std::move(st));
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  HEARTH_RETURN_IF_ERROR(first_error);
  // A pageable copy (a worker that could not pin) may return before its DMA lands, on the
  // legacy stream, which the context's non-blocking stream does not wait for.
  return cuda_status(cudaDeviceSynchronize(), "finishing the upload");
}

}  // namespace hearth::cuda
