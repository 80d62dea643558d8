// Shared by the C API's translation units (ooc_cudnn.h, ooc_cublas.h): the one exception-to-status
// translation every entry point goes through, the calling thread's last call, descriptor reading,
// and the dispatch between the library's own call and the out-of-core path.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ooc/ooc.hpp"
#include "ooc/pool_activation_softmax.hpp"

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

// What a failed status means, for the thread's last error: cuDNN's name for it and, where cuDNN
// kept one, its reason; CUDA's name and description (and CUDA's own last error cleared, so that
// the next library to ask does not take the failure for its own).
std::string cudnn_failure_text(cudnnStatus_t status);
std::string cuda_failure_text(cudaError_t status);

// Runs `body` (returning a Status) for the entry point `call` and never lets an exception out: a
// status other than `success` leaves "call: describe(status)" as the thread's last error, an
// exception the status `of_exception(call)` maps it to. Every entry point goes through this.
template <typename Status, typename Body, typename Describe, typename OfException>
Status guarded_call(const char* call, Status success, Body&& body, Describe describe,
                    OfException of_exception) noexcept {
  clear_last_error();
  try {
    const Status status = std::forward<Body>(body)();
    if (status != success) set_last_error(std::string(call) + ": " + describe(status));
    return status;
  } catch (...) {
    return of_exception(call);
  }
}

template <typename Body>
cudnnStatus_t guarded(const char* call, Body&& body) noexcept {
  return guarded_call(call, CUDNN_STATUS_SUCCESS, std::forward<Body>(body), cudnn_failure_text,
                      cudnn_status_of_current_exception);
}

template <typename Body>
cudaError_t guarded_cuda(const char* call, Body&& body) noexcept {
  return guarded_call(call, cudaSuccess, std::forward<Body>(body), cuda_failure_text,
                      cuda_status_of_current_exception);
}

// The calling thread's last successful call: cuDNN called directly (with a line saying so), or a plan run.
void record_direct_call(std::string text);
void record_plan_run(Plan&& plan, const RunStats& stats);
// A chunked call that runs without a Plan (the cuBLAS level-1 look-alikes): `text` describes it.
void record_streamed_call(std::string text, const RunStats& stats, size_t peak_device_bytes);

// snprintf's contract: writes at most len - 1 characters and a NUL, returns text.size().
size_t copy_text(const std::string& text, char* buf, size_t len) noexcept;

// --- capi_descriptors.cpp ---

using Shape = std::vector<int64_t>;

// Shapes of fully-packed NCHW float32 descriptors of rank min_rank..max_rank (tensors) or 4-D/5-D
// (filters). Throws invalid_argument (null or unset descriptor) or not_supported (other dtype,
// layout, strides or rank); `name` is the argument's name in cuDNN's signature.
// dtype: where the caller serves half precision too (the convolutions and the layers), receives
// the descriptor's element type (CUDNN_DATA_FLOAT, _HALF or _BFLOAT16); null: CUDNN_DATA_FLOAT only.
// layouts: where the caller serves channels-last too (the convolutions), receives the layouts the
// descriptor is fully packed in (LayoutSet: both where they coincide, C == 1 or one position);
// null: fully-packed NCHW only. A filter's layouts follow its format (CUDNN_TENSOR_NHWC: channels-last).
struct LayoutSet {
  bool channels_first = false, channels_last = false;
};
Shape tensor_shape(cudnnTensorDescriptor_t desc, const char* name, int min_rank = 4, int max_rank = 5,
                   DType* dtype = nullptr, LayoutSet* layouts = nullptr);
Shape filter_shape(cudnnFilterDescriptor_t desc, const char* name, DType* dtype = nullptr,
                   LayoutSet* layouts = nullptr);
// The one layout a call's descriptors share (channels-first where both fit every one); throws
// not_supported naming `call` when they share none.
Layout common_layout(const std::vector<std::pair<LayoutSet, const char*>>& descriptors, const char* call);

struct ConvGeometry {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;  // cudnnSetConvolutionGroupCount's
};
// Cross-correlation, float compute, `spatial_dims` dimensions.
ConvGeometry conv_geometry(cudnnConvolutionDescriptor_t desc, size_t spatial_dims);
// What a convolution descriptor's math type (cudnnSetConvolutionMathType) allows float32 data,
// as cuDNN reads it: CUDNN_FMA_MATH full FP32; CUDNN_DEFAULT_MATH (a fresh descriptor's),
// CUDNN_TENSOR_OP_MATH and _ALLOW_CONVERSION TF32, which cuDNN runs on sm_80 and later.
MathMode conv_math_mode(cudnnConvolutionDescriptor_t desc);

struct ActivationSetting {
  cudnnActivationMode_t mode{};
  cudnnNanPropagation_t nan{};
  double coef = 0;        // clipped ReLU's ceiling, ELU's alpha
  double swish_beta = 1;  // cudnnSetActivationDescriptorSwishBeta's
};
ActivationSetting activation_setting(cudnnActivationDescriptor_t desc, const char* name);

struct PoolingSetting {
  cudnnPoolingMode_t mode{};
  std::vector<int64_t> window, padding, stride;
};
// `spatial_dims` dimensions (the tensors'); invalid_argument otherwise.
PoolingSetting pooling_setting(cudnnPoolingDescriptor_t desc, size_t spatial_dims);

// --- capi_layers.cpp: descriptors as the library's layers take them ---

struct Activation {
  ActivationMode mode;
  double coef;  // clipped ReLU's ceiling, ELU's alpha, swish's beta
};
// activationDesc's mode (invalid_argument for IDENTITY, which only the fused calls take).
Activation activation(cudnnActivationDescriptor_t desc);

struct Pooling {
  ConvProblem problem;  // pool_forward's, with the call's alpha and beta
  PoolMode mode;
};
// poolingDesc over an x of shape `x`: invalid_argument when the window does not fit, not_supported
// for padding above half the window.
Pooling pooling(cudnnPoolingDescriptor_t desc, const Shape& x, double alpha, double beta,
                DType dtype = DType::float32);

// [1, K, 1, 1(, 1)]: the bias-shaped descriptors (bias, db) of a rank-`rank` convolution.
Shape bias_shape(size_t rank, int64_t k);

// Throws not_supported unless `type` (the descriptor `name`'s) is `first` (`first_name`'s): one
// call computes in one data type. `call` says which ("one convolution", "one call").
void same_dtype(DType type, const char* name, DType first, const char* first_name, const char* call);
// Throws invalid_argument unless a and b have the same rank, naming both.
void same_rank(const Shape& a, const char* a_name, const Shape& b, const char* b_name);
// Throws invalid_argument unless `got` is `want`, naming the descriptor.
void expect_shape(const Shape& got, const Shape& want, const char* name);
void require_pointer(const void* ptr, const char* name);
void require_pointers(std::initializer_list<std::pair<const void*, const char*>> pointers);
std::string format_shape(const Shape& shape);
int64_t elements(const Shape& shape);

// --- capi_dispatch.cpp: the choice between cuDNN itself and the out-of-core path ---

// A tensor of the call: where it is (null: an optional one left out) and how many floats it spans.
struct TensorRef {
  const void* data;
  int64_t elements;
};

// The line oocGetLastPlanDescription gives when the library (`call`) runs the call itself, or
// nothing when the call must run out of core: some tensor is in host memory, too large for cuDNN's
// int counts, or the tensors together exceed the memory limit.
std::optional<std::string> in_core(const char* call, std::initializer_list<TensorRef> tensors);

// Options for the chunked run, after waiting for the caller's stream (its work may produce the
// inputs) and the legacy default stream; `caller_stream` is only asked on the cuda backend.
Options out_of_core_options(const std::function<cudaStream_t()>& caller_stream);
Options out_of_core_options(cudnnHandle_t handle);
// A convolution's: also computing as convDesc's math type says (conv_math_mode).
Options out_of_core_options(cudnnHandle_t handle, cudnnConvolutionDescriptor_t convDesc);

// True while tests run the out-of-core path on the host backend (testing::use_host_backend).
bool host_backend_for_tests() noexcept;

void check_handle(cudnnHandle_t handle);
inline float scalar(const void* p) { return *static_cast<const float*>(p); }
// Caller tensors as the library's float pointers (where the C API serves float data only).
inline const float* floats(const void* p) { return static_cast<const float*>(p); }
inline float* floats(void* p) { return static_cast<float*>(p); }

// --- capi_cancel.cpp: oocCancel ---

// The out-of-core call running on `handle` (a cuDNN or cuBLAS handle), registered for its duration
// so that oocCancel(handle) from another thread can stop it (ooc::cancelled, then
// OOC_STATUS_CANCELLED). Cancelling reaches only the calls running when it is asked.
class CancellableCall {
 public:
  explicit CancellableCall(const void* handle);
  ~CancellableCall();
  CancellableCall(const CancellableCall&) = delete;
  CancellableCall& operator=(const CancellableCall&) = delete;
  const CallObserver* observer() const { return &observer_; }

 private:
  const void* handle_;
  CallObserver observer_;
};
// Sets the cancel flag of the calls running on `handle`; false when none is.
bool cancel_calls_on(const void* handle);

// Runs `direct()` (the library's own call, returning its status) when in_core says so, else
// `chunked(options, plan, stats)` with options from `options()`, cancellable through `handle`;
// records what ran as the thread's last call. (A direct call is cuDNN's own, which cannot be
// stopped.)
template <typename Status, typename Direct, typename Chunked>
Status dispatch_call(Status success, const char* call, const void* handle, std::initializer_list<TensorRef> tensors,
                     const std::function<Options()>& options, Direct direct, Chunked chunked) {
  if (auto text = in_core(call, tensors)) {
    const Status status = direct();
    if (status == success) record_direct_call(std::move(*text));
    return status;
  }
  Plan plan;
  RunStats stats;
  const CancellableCall cancellable(handle);
  Options o = options();
  o.observer = cancellable.observer();
  chunked(o, &plan, &stats);
  record_plan_run(std::move(plan), stats);
  return success;
}

template <typename Direct, typename Chunked>
cudnnStatus_t dispatch(const char* cudnn_call, std::initializer_list<TensorRef> tensors, cudnnHandle_t handle,
                       Direct direct, Chunked chunked) {
  return dispatch_call(CUDNN_STATUS_SUCCESS, cudnn_call, handle, tensors, [handle] { return out_of_core_options(handle); },
                       direct, chunked);
}
// dispatch for a convolution, whose chunks compute as convDesc's math type says.
template <typename Direct, typename Chunked>
cudnnStatus_t dispatch_conv(const char* cudnn_call, std::initializer_list<TensorRef> tensors, cudnnHandle_t handle,
                            cudnnConvolutionDescriptor_t convDesc, Direct direct, Chunked chunked) {
  return dispatch_call(CUDNN_STATUS_SUCCESS, cudnn_call, handle, tensors,
                       [handle, convDesc] { return out_of_core_options(handle, convDesc); }, direct, chunked);
}

// Per-channel (and other small) tensors the library reads and writes on the host: copies of
// caller memory of any kind.
std::vector<float> read_floats(const void* src, int64_t count);
void write_floats(void* dst, const std::vector<float>& values);

namespace testing {
// Test-only: runs the out-of-core path on the host backend (never touching the handle or CUDA),
// so CI checks the C API's numerics without a GPU; ooc_cudaMalloc then gives pageable host memory
// and ooc_cudaMemcpy copies with memmove, so whole C API programs run too. Not part of the C API.
void use_host_backend(bool enabled);
}  // namespace testing

}  // namespace ooc::capi
