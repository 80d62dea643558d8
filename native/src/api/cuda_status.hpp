// Status checks for the CUDA runtime and cuDNN calls that the layers above the backends (the C API)
// make themselves. A failure throws ooc::cuda_error / ooc::cudnn_error worded as the backends' own
// checks word theirs (the call, the error, file:line) and leaves no stale CUDA "last error" behind;
// callers need not include the CUDA backend to get that.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace ooc::api {

void check_cuda_status(cudaError_t status, const char* call, const char* file, int line);
void check_cudnn_status(cudnnStatus_t status, const char* call, const char* file, int line);

}  // namespace ooc::api

// Named apart from the backend's OOC_CUDA_CHECK / OOC_CUDNN_CHECK so that both can be in scope.
#define OOC_API_CUDA_CHECK(call) ::ooc::api::check_cuda_status((call), #call, __FILE__, __LINE__)
#define OOC_API_CUDNN_CHECK(call) ::ooc::api::check_cudnn_status((call), #call, __FILE__, __LINE__)
