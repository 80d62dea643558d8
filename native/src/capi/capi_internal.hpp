// Shared by the C API's translation units (ooc_cudnn.h): the one exception-to-status translation
// every entry point goes through, the calling thread's last call, and descriptor reading.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ooc/ooc.hpp"

namespace ooc::capi {

// --- capi_status.cpp ---

// Maps the exception being handled (call only inside a catch block) to cuDNN's status and keeps its
// message as the thread's last error: invalid_argument -> BAD_PARAM, not_supported ->
// NOT_SUPPORTED, out_of_budget / bad_alloc / cudaErrorMemoryAllocation -> ALLOC_FAILED,
// cudnn_error -> its status, cuda_error -> EXECUTION_FAILED, anything else -> INTERNAL_ERROR.
cudnnStatus_t cudnn_status_of_current_exception(const char* call) noexcept;
// The same for the cuda* look-alikes: cuda_error -> its status, invalid_argument ->
// cudaErrorInvalidValue, bad_alloc -> cudaErrorMemoryAllocation, anything else -> cudaErrorUnknown.
cudaError_t cuda_status_of_current_exception(const char* call) noexcept;

void clear_last_error() noexcept;
void set_last_error(std::string message) noexcept;

// Runs `body` (returning cudnnStatus_t) for the entry point `call`; never lets an exception out.
template <typename Body>
cudnnStatus_t guarded(const char* call, Body&& body) noexcept {
  clear_last_error();
  try {
    const cudnnStatus_t status = std::forward<Body>(body)();
    if (status != CUDNN_STATUS_SUCCESS) {
      char detail[512] = {};
      cudnnGetLastErrorString(detail, sizeof(detail));
      set_last_error(std::string(call) + ": " + cudnnGetErrorString(status) + (detail[0] ? std::string(" (") + detail + ")" : ""));
    }
    return status;
  } catch (...) {
    return cudnn_status_of_current_exception(call);
  }
}

template <typename Body>
cudaError_t guarded_cuda(const char* call, Body&& body) noexcept {
  clear_last_error();
  try {
    const cudaError_t status = std::forward<Body>(body)();
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // not the next library's error
      set_last_error(std::string(call) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
    }
    return status;
  } catch (...) {
    return cuda_status_of_current_exception(call);
  }
}

// The calling thread's last successful call: cuDNN called directly (with a line saying so), or a plan run.
void record_direct_call(std::string text);
void record_plan_run(Plan&& plan, const RunStats& stats);

// snprintf's contract: writes at most len - 1 characters and a NUL, returns text.size().
size_t copy_text(const std::string& text, char* buf, size_t len) noexcept;

// --- capi_descriptors.cpp ---

using Shape = std::vector<int64_t>;

// Shapes of fully-packed NCHW float32 descriptors, 4-D or 5-D. Throws invalid_argument (null or
// unset descriptor) or not_supported (other dtype, layout, strides or rank); `name` is the
// argument's name in cuDNN's signature.
Shape tensor_shape(cudnnTensorDescriptor_t desc, const char* name);
Shape filter_shape(cudnnFilterDescriptor_t desc, const char* name);

struct ConvGeometry {
  std::vector<int64_t> stride, padding, dilation;
};
// Cross-correlation, float compute, group count 1, `spatial_dims` dimensions.
ConvGeometry conv_geometry(cudnnConvolutionDescriptor_t desc, size_t spatial_dims);

// Throws invalid_argument unless `got` is `want`, naming the descriptor.
void expect_shape(const Shape& got, const Shape& want, const char* name);
void require_pointer(const void* ptr, const char* name);
std::string format_shape(const Shape& shape);
int64_t elements(const Shape& shape);

// --- capi_convolution.cpp ---

namespace testing {
// Test-only: runs the out-of-core path on the host backend (never touching the handle or CUDA),
// so CI checks the C API's numerics without a GPU. Not part of the C API.
void use_host_backend(bool enabled);
}  // namespace testing

}  // namespace ooc::capi
