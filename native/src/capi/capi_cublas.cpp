#include "capi/capi_cublas.hpp"

#include <algorithm>

#include "api/cuda_status.hpp"
#include "ooc/errors.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {

cublasStatus_t cublas_status(cudnnStatus_t status) {
  if (status == OOC_STATUS_CANCELLED) return CUBLAS_STATUS_EXECUTION_FAILED;  // cuBLAS has no such status
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return CUBLAS_STATUS_SUCCESS;
    case CUDNN_STATUS_BAD_PARAM: return CUBLAS_STATUS_INVALID_VALUE;
    case CUDNN_STATUS_NOT_SUPPORTED: return CUBLAS_STATUS_NOT_SUPPORTED;
    case CUDNN_STATUS_ALLOC_FAILED: return CUBLAS_STATUS_ALLOC_FAILED;
    case CUDNN_STATUS_EXECUTION_FAILED: return CUBLAS_STATUS_EXECUTION_FAILED;
    default: return CUBLAS_STATUS_INTERNAL_ERROR;
  }
}

std::string cublas_failure_text(cublasStatus_t status) {
  return std::string(cublasGetStatusName(status)) + " (" + cublasGetStatusString(status) + ")";
}

cublasStatus_t cublas_status_of_current_exception(const char* call) noexcept {
  return cublas_status(cudnn_status_of_current_exception(call));
}

cublasStatus_t null_handle(const char* call) {
  clear_last_error();
  set_last_error(std::string(call) + ": handle is null");
  return CUBLAS_STATUS_NOT_INITIALIZED;
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(static_cast<int>(status), std::string(call) + " failed: " + cublasGetStatusName(status));
}

bool device_pointer_mode(cublasHandle_t handle) {
  if (host_backend_for_tests()) return false;  // the handle is never touched there
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  check_cublas(cublasGetPointerMode(handle, &mode), "cublasGetPointerMode");
  return mode == CUBLAS_POINTER_MODE_DEVICE;
}

float read_scalar(cublasHandle_t handle, const float* p) {
  if (!device_pointer_mode(handle)) return *p;
  float v = 0;
  OOC_API_CUDA_CHECK(cudaMemcpy(&v, p, sizeof(v), cudaMemcpyDeviceToHost));
  return v;
}

void write_scalar(cublasHandle_t handle, float* p, float value) {
  if (!device_pointer_mode(handle)) {
    *p = value;
    return;
  }
  OOC_API_CUDA_CHECK(cudaMemcpy(p, &value, sizeof(value), cudaMemcpyHostToDevice));
}

bool transposes(cublasOperation_t op, const char* name) {
  switch (op) {
    case CUBLAS_OP_N: return false;
    case CUBLAS_OP_T:
    case CUBLAS_OP_C: return true;
    default:
      throw invalid_argument(std::string(name) + " must be CUBLAS_OP_N, CUBLAS_OP_T or CUBLAS_OP_C, got " +
                             std::to_string(static_cast<int>(op)));
  }
}

void check_ld(const char* name, int ld, int rows) {
  if (ld < std::max(1, rows))
    throw invalid_argument(std::string(name) + " is " + std::to_string(ld) + ", less than max(1, " +
                           std::to_string(rows) + ")");
}

Options cublas_out_of_core_options(cublasHandle_t handle) {
  Options options = out_of_core_options([handle] {
    cudaStream_t stream = nullptr;
    check_cublas(cublasGetStream(handle, &stream), "cublasGetStream");
    return stream;
  });
  // The handle's math mode, as cublasSgemm honours it: TF32 only under CUBLAS_TF32_TENSOR_OP_MATH
  // (the flag bits above it, such as CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, aside);
  // cuBLAS' default is full FP32. Not asked of the host backend (tests hand it no real handle),
  // which computes full FP32 either way.
  if (options.backend == BackendKind::cuda) {
    cublasMath_t mode{};
    check_cublas(cublasGetMathMode(handle, &mode), "cublasGetMathMode");
    constexpr unsigned kModeBits = 0xf;
    if ((static_cast<unsigned>(mode) & kModeBits) == CUBLAS_TF32_TENSOR_OP_MATH) options.math = MathMode::tf32;
  }
  return options;
}

}  // namespace ooc::capi
