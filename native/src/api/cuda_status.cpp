// One wording of CUDA and cuDNN failures for the whole library: the CUDA backend's.
#include "api/cuda_status.hpp"

#include "backend/cuda/cuda_check.hpp"

namespace ooc::api {

void check_cuda_status(cudaError_t status, const char* call, const char* file, int line) {
  cuda_detail::check_cuda(status, call, file, line);
}

void check_cudnn_status(cudnnStatus_t status, const char* call, const char* file, int line) {
  cuda_detail::check_cudnn(status, call, file, line);
}

}  // namespace ooc::api
