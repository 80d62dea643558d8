// An owned CUDA stream. Non-blocking: it must not serialize against the legacy default stream,
// which other libraries in the process (torch, cupy) may be using.
#pragma once

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

class CudaStream {
 public:
  CudaStream() { OOC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (stream_) cuda_detail::ignore_cuda_error(cudaStreamDestroy(stream_));
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace ooc
