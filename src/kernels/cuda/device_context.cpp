// DeviceContext: stream, cuBLASLt handle, workspace and the budgeted device allocator.
// Host-only code (compiled by the C++ compiler) so it can speak Status.
#include "kernels/cuda/device_context.h"

#include <fmt/format.h>

#include <utility>

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

Status DeviceContext::synchronize() {
  HEARTH_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "waiting for the stream"));
  return cuda_status(cudaGetLastError(), "checking kernel launches");
}

}  // namespace hearth::cuda
