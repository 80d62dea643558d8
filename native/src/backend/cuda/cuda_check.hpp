// Turns CUDA runtime and cuDNN status codes into ooc::cuda_error / ooc::cudnn_error that name the
// call, the error and file:line, so a failure on the GPU machine can be traced from its message.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "ooc/errors.hpp"

namespace ooc::cuda_detail {

// A failed runtime call also sets the thread's "last error"; reset it so that the next library to
// call cudaGetLastError (torch after a kernel launch, say) does not take our failure for its own.
inline void clear_last_cuda_error() noexcept { (void)cudaGetLastError(); }

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
// cuDNN's reason for the thread's last failed call ("" when it gave none).
std::string last_cudnn_error();
// `reason`: what last_cudnn_error said right after the failure; read here when not given.
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line,
                                    const std::string& reason);
[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  throw_cudnn_error(status, call, file, line, last_cudnn_error());
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_error(status, call, file, line);
}

// For noexcept paths (destructors, synchronize on error paths): a failure there cannot be
// reported, but it must not linger as the thread's last error either.
inline void ignore_cuda_error(cudaError_t status) noexcept {
  if (status != cudaSuccess) clear_last_cuda_error();
}

}  // namespace ooc::cuda_detail

#define OOC_CUDA_CHECK(call) ::ooc::cuda_detail::check_cuda((call), #call, __FILE__, __LINE__)
#define OOC_CUDNN_CHECK(call) ::ooc::cuda_detail::check_cudnn((call), #call, __FILE__, __LINE__)
