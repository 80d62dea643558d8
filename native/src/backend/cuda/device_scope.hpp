// Makes a device current for the calling thread and restores the caller's device on exit: the
// backend may be called from any thread, and a pyooc call must not move the caller's own CUDA work
// to another GPU.
#pragma once

#include <new>

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    OOC_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      OOC_CUDA_CHECK(cudaSetDevice(device));
      switched_ = true;
    }
  }

  // For noexcept paths: ok() says whether the device could be made current (false once the CUDA
  // runtime is shutting down at process exit).
  DeviceScope(int device, std::nothrow_t) noexcept {
    cudaError_t status = cudaGetDevice(&previous_);
    if (status == cudaSuccess && previous_ != device) {
      status = cudaSetDevice(device);
      switched_ = status == cudaSuccess;
    }
    ok_ = status == cudaSuccess;
    cuda_detail::ignore_cuda_error(status);
  }

  ~DeviceScope() {
    if (switched_) cuda_detail::ignore_cuda_error(cudaSetDevice(previous_));
  }

  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  bool ok() const noexcept { return ok_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  bool ok_ = true;
};

}  // namespace ooc
