// Shared by the cuBLAS look-alikes (ooc_cublas.h: capi_gemm.cpp, capi_blas_vectors.cpp): cuBLAS'
// statuses for the C API's failures, the guard every entry point runs in, and the scalars and
// stream of the caller's handle.
#pragma once

#include <cublas_v2.h>

#include <string>
#include <utility>

#include "capi/capi_internal.hpp"

namespace ooc::capi {

// The C API's statuses (capi_status.cpp's mapping of exceptions) in cuBLAS' words.
cublasStatus_t cublas_status(cudnnStatus_t status);
std::string cublas_failure_text(cublasStatus_t status);
cublasStatus_t cublas_status_of_current_exception(const char* call) noexcept;

template <typename Body>
cublasStatus_t guarded_cublas(const char* call, Body&& body) noexcept {
  return guarded_call(call, CUBLAS_STATUS_SUCCESS, std::forward<Body>(body), cublas_failure_text,
                      cublas_status_of_current_exception);
}

// What cuBLAS says of a null handle (CUBLAS_STATUS_NOT_INITIALIZED), with the thread's last error.
cublasStatus_t null_handle(const char* call);

// Throws cuda_error naming `call` unless status is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t status, const char* call);

// alpha, beta or a result, from or to the host or the device as the handle's pointer mode says.
// Called after the handle's stream has been drained (the scalars may be its results).
bool device_pointer_mode(cublasHandle_t handle);
float read_scalar(cublasHandle_t handle, const float* p);
void write_scalar(cublasHandle_t handle, float* p, float value);

// Whether op transposes its (real) matrix: CUBLAS_OP_C is CUBLAS_OP_T for real data, as in cuBLAS.
// Throws invalid_argument naming `name` for another value.
bool transposes(cublasOperation_t op, const char* name);
// cuBLAS' rule: a leading dimension is at least its column-major matrix's row count (and 1).
void check_ld(const char* name, int ld, int rows);

// Options for the chunked run after draining the handle's stream (out_of_core_options).
Options cublas_out_of_core_options(cublasHandle_t handle);

}  // namespace ooc::capi
