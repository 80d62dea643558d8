// ooc_cudnnConvolution*: cuDNN's convolution entry points over device, pinned or pageable memory.
// Each checks its arguments first (before the handle is touched), then either calls cuDNN itself
// (everything on the device and within the memory limit) or runs the out-of-core path.
#include <atomic>
#include <initializer_list>
#include <optional>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/pointer_kind.hpp"
#include "capi/capi_internal.hpp"
#include "ooc/fused.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

std::atomic<bool> g_host_backend{false};

// Legacy cuDNN descriptors count elements in int; beyond that only the chunked path can run.
constexpr int64_t kMaxInCoreElements = (int64_t{1} << 31) - 1;

struct TensorRef {
  const void* data;
  int64_t elements;
};

// The line oocGetLastPlanDescription gives when cuDNN ran the call itself, or nothing when the
// call must run out of core: some tensor is in host memory, too large for cuDNN's int counts, or
// the tensors together exceed the memory limit.
std::optional<std::string> in_core(const char* cudnn_call, std::initializer_list<TensorRef> tensors) {
  if (g_host_backend) return std::nullopt;
  size_t bytes = 0;
  for (const TensorRef& t : tensors) {
    if (t.elements > kMaxInCoreElements || !is_device_memory(t.data)) return std::nullopt;
    bytes += static_cast<size_t>(t.elements) * sizeof(float);
  }
  const size_t limit = default_memory_limit();
  if (limit != 0 && bytes > limit) return std::nullopt;
  return std::string(cudnn_call) + " called directly: every tensor on the device, " + std::to_string(bytes) +
         " bytes" + (limit ? " within the memory limit of " + std::to_string(limit) + " bytes" : " (no memory limit set)");
}

// Options for the chunked run. The handle's stream may still be producing the inputs: wait for it,
// and for the legacy default stream, which a blocking handle stream would be ordered after
// (ooc_cudaMemcpy's device-to-device copies land there). The run returns when the output is in
// place, so later work on either stream sees it.
Options out_of_core_options(cudnnHandle_t handle) {
  Options options;
  if (g_host_backend) {
    options.backend = BackendKind::host;
    return options;
  }
  if (device_count() == 0) throw cuda_error(cudaErrorNoDevice, "no CUDA device is present");
  options.backend = BackendKind::cuda;
  OOC_CUDA_CHECK(cudaGetDevice(&options.device));
  cudaStream_t stream = nullptr;
  OOC_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  OOC_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (stream != nullptr) OOC_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return options;
}

void check_handle(cudnnHandle_t handle) {
  if (!handle) throw invalid_argument("handle is null");
}

void require_pointers(std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [ptr, name] : pointers) require_pointer(ptr, name);
}

float scalar(const void* p) { return *static_cast<const float*>(p); }

void same_rank(const Shape& a, const char* a_name, const Shape& b, const char* b_name) {
  if (a.size() != b.size())
    throw invalid_argument(std::string(a_name) + " has " + std::to_string(a.size()) + " dimensions, " + b_name +
                           " has " + std::to_string(b.size()));
}

// [1, K, 1, 1(, 1)]: the bias-shaped descriptors (bias, db) of a rank-`rank` convolution.
Shape bias_shape(size_t rank, int64_t k) {
  Shape s(rank, 1);
  s[1] = k;
  return s;
}

ConvProblem forward_problem(cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
                            cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc, double alpha,
                            double beta, bool has_bias) {
  const Shape x = tensor_shape(xDesc, "xDesc");
  const Shape w = filter_shape(wDesc, "wDesc");
  same_rank(w, "wDesc", x, "xDesc");
  const ConvGeometry g = conv_geometry(convDesc, x.size() - 2);
  const Shape y = tensor_shape(yDesc, "yDesc");
  same_rank(y, "yDesc", x, "xDesc");
  ConvProblem p = ConvProblem::forward(x, w, g.stride, g.padding, g.dilation, 1, alpha, beta, has_bias);
  expect_shape(y, p.y_shape(), "yDesc");
  return p;
}

// Calls cuDNN itself (`direct`) when in_core says so, else runs `chunked(options, plan, stats)`;
// records what ran as the thread's last call.
template <typename Direct, typename Chunked>
cudnnStatus_t dispatch(const char* cudnn_call, std::initializer_list<TensorRef> tensors, cudnnHandle_t handle,
                       Direct direct, Chunked chunked) {
  if (auto text = in_core(cudnn_call, tensors)) {
    const cudnnStatus_t status = direct();
    if (status == CUDNN_STATUS_SUCCESS) record_direct_call(std::move(*text));
    return status;
  }
  Plan plan;
  RunStats stats;
  chunked(out_of_core_options(handle), &plan, &stats);
  record_plan_run(std::move(plan), stats);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

void testing::use_host_backend(bool enabled) { g_host_backend = enabled; }

}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cudnnStatus_t ooc_cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                                     const cudnnTensorDescriptor_t xDesc, const void* x,
                                                     const cudnnFilterDescriptor_t wDesc, const void* w,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                                     size_t workSpaceSizeInBytes, const void* beta,
                                                     const cudnnTensorDescriptor_t yDesc, void* y) {
  return guarded("ooc_cudnnConvolutionForward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {x, "x"}, {w, "w"}, {beta, "beta"}, {y, "y"}});
    const ConvProblem p = forward_problem(xDesc, wDesc, convDesc, yDesc, scalar(alpha), scalar(beta), false);
    return dispatch(
        "cudnnConvolutionForward", {{x, p.x_elements()}, {w, p.w_elements()}, {y, p.y_elements()}}, handle,
        [&] {
          return cudnnConvolutionForward(handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                         workSpaceSizeInBytes, beta, yDesc, y);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_forward(p, static_cast<const float*>(x), static_cast<const float*>(w), nullptr, static_cast<float*>(y),
                       options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnConvolutionBiasActivationForward(
    cudnnHandle_t handle, const void* alpha1, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void* workSpace, size_t workSpaceSizeInBytes, const void* alpha2,
    const cudnnTensorDescriptor_t zDesc, const void* z, const cudnnTensorDescriptor_t biasDesc, const void* bias,
    const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t yDesc, void* y) {
  return guarded("ooc_cudnnConvolutionBiasActivationForward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha1, "alpha1"}, {x, "x"}, {w, "w"}, {alpha2, "alpha2"}, {z, "z"}, {bias, "bias"}, {y, "y"}});
    if (!activationDesc) throw invalid_argument("activationDesc is null");
    cudnnActivationMode_t mode{};
    cudnnNanPropagation_t nan{};
    double coef = 0;
    const cudnnStatus_t read = cudnnGetActivationDescriptor(activationDesc, &mode, &nan, &coef);
    if (read != CUDNN_STATUS_SUCCESS)
      throw invalid_argument(std::string("activationDesc cannot be read: ") + cudnnGetErrorString(read));
    if (mode != CUDNN_ACTIVATION_RELU && mode != CUDNN_ACTIVATION_IDENTITY)
      throw not_supported("activationDesc: only CUDNN_ACTIVATION_RELU and CUDNN_ACTIVATION_IDENTITY are supported");
    const ConvProblem p = forward_problem(xDesc, wDesc, convDesc, yDesc, scalar(alpha1), scalar(alpha2), true);
    expect_shape(tensor_shape(zDesc, "zDesc"), p.y_shape(), "zDesc");
    expect_shape(tensor_shape(biasDesc, "biasDesc"), bias_shape(p.y_shape().size(), p.k), "biasDesc");
    return dispatch(
        "cudnnConvolutionBiasActivationForward",
        {{x, p.x_elements()}, {w, p.w_elements()}, {z, z == y ? 0 : p.y_elements()}, {bias, p.k}, {y, p.y_elements()}},
        handle,
        [&] {
          return cudnnConvolutionBiasActivationForward(handle, alpha1, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                                       workSpaceSizeInBytes, alpha2, zDesc, z, biasDesc, bias,
                                                       activationDesc, yDesc, y);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          // One pass: z is read as each y tile's start, bias and the activation are applied on the
          // device before the tile leaves (fused.hpp); z may be y.
          FusedActivation act;
          act.identity = mode == CUDNN_ACTIVATION_IDENTITY;
          conv_bias_activation_forward(p, act, static_cast<const float*>(x), static_cast<const float*>(w),
                                       static_cast<const float*>(z), static_cast<const float*>(bias),
                                       static_cast<float*>(y), options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                                          const cudnnFilterDescriptor_t wDesc, const void* w,
                                                          const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                                          const cudnnConvolutionDescriptor_t convDesc,
                                                          cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                                          size_t workSpaceSizeInBytes, const void* beta,
                                                          const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return guarded("ooc_cudnnConvolutionBackwardData", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {w, "w"}, {dy, "dy"}, {beta, "beta"}, {dx, "dx"}});
    const Shape ws = filter_shape(wDesc, "wDesc");
    const Shape dys = tensor_shape(dyDesc, "dyDesc");
    const Shape dxs = tensor_shape(dxDesc, "dxDesc");
    same_rank(ws, "wDesc", dxs, "dxDesc");
    same_rank(dys, "dyDesc", dxs, "dxDesc");
    const ConvGeometry g = conv_geometry(convDesc, dxs.size() - 2);
    const ConvProblem p = ConvProblem::backward_data(dys, ws, dxs, g.stride, g.padding, g.dilation, 1, scalar(alpha),
                                                     scalar(beta));
    return dispatch(
        "cudnnConvolutionBackwardData", {{w, p.w_elements()}, {dy, p.y_elements()}, {dx, p.x_elements()}}, handle,
        [&] {
          return cudnnConvolutionBackwardData(handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace,
                                              workSpaceSizeInBytes, beta, dxDesc, dx);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_backward_data(p, static_cast<const float*>(dy), static_cast<const float*>(w), static_cast<float*>(dx),
                             options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                                            const cudnnTensorDescriptor_t xDesc, const void* x,
                                                            const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                                            const cudnnConvolutionDescriptor_t convDesc,
                                                            cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                                            size_t workSpaceSizeInBytes, const void* beta,
                                                            const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return guarded("ooc_cudnnConvolutionBackwardFilter", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {x, "x"}, {dy, "dy"}, {beta, "beta"}, {dw, "dw"}});
    const Shape xs = tensor_shape(xDesc, "xDesc");
    const Shape dys = tensor_shape(dyDesc, "dyDesc");
    const Shape dws = filter_shape(dwDesc, "dwDesc");
    same_rank(dys, "dyDesc", xs, "xDesc");
    same_rank(dws, "dwDesc", xs, "xDesc");
    const ConvGeometry g = conv_geometry(convDesc, xs.size() - 2);
    const ConvProblem p = ConvProblem::backward_filter(xs, dys, dws, g.stride, g.padding, g.dilation, 1, scalar(alpha),
                                                       scalar(beta));
    return dispatch(
        "cudnnConvolutionBackwardFilter", {{x, p.x_elements()}, {dy, p.y_elements()}, {dw, p.w_elements()}}, handle,
        [&] {
          return cudnnConvolutionBackwardFilter(handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace,
                                                workSpaceSizeInBytes, beta, dwDesc, dw);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_backward_filter(p, static_cast<const float*>(x), static_cast<const float*>(dy), static_cast<float*>(dw),
                               options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void* alpha,
                                                          const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                                          const void* beta, const cudnnTensorDescriptor_t dbDesc,
                                                          void* db) {
  return guarded("ooc_cudnnConvolutionBackwardBias", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {dy, "dy"}, {beta, "beta"}, {db, "db"}});
    const Shape dys = tensor_shape(dyDesc, "dyDesc");
    expect_shape(tensor_shape(dbDesc, "dbDesc"), bias_shape(dys.size(), dys[1]), "dbDesc");
    const ConvProblem p = ConvProblem::backward_bias(dys, scalar(alpha), scalar(beta));
    return dispatch(
        "cudnnConvolutionBackwardBias", {{dy, p.y_elements()}, {db, p.k}}, handle,
        [&] { return cudnnConvolutionBackwardBias(handle, alpha, dyDesc, dy, beta, dbDesc, db); },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_backward_bias(p, static_cast<const float*>(dy), static_cast<float*>(db), options, plan, stats);
        });
  });
}

extern "C" void oocSetMemoryLimit(size_t bytes) { set_default_memory_limit(bytes); }
extern "C" size_t oocGetMemoryLimit(void) { return default_memory_limit(); }
