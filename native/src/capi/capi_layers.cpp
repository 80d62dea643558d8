// ooc_cudnnAddTensor, ooc_cudnnActivation*, ooc_cudnnPooling*, ooc_cudnnSoftmax*: cuDNN's layer
// entry points over device, pinned or pageable memory, mapped onto the library's layers
// (pool_activation_softmax.hpp), for CUDNN_DATA_FLOAT, _HALF and _BFLOAT16 tensors (one type a call). Each checks its arguments first (before the handle is touched),
// then calls cuDNN itself or runs the out-of-core path (capi_dispatch.cpp).
#include "capi/capi_internal.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

using Descriptors = std::initializer_list<std::pair<cudnnTensorDescriptor_t, const char*>>;

// Element-wise layers and softmax may have any rank cuDNN describes (3 to CUDNN_DIM_MAX).
constexpr int kMinRank = 3, kMaxRank = CUDNN_DIM_MAX;

// The shape every descriptor of `descs` has (the first one's; a mismatch names the other), and in
// *dtype their one data type (float, half or bfloat16; a mismatch is NOT_SUPPORTED naming it).
Shape common_shape(Descriptors descs, int min_rank, int max_rank, DType* dtype) {
  const char* first_name = descs.begin()->second;
  const Shape first = tensor_shape(descs.begin()->first, first_name, min_rank, max_rank, dtype);
  for (const auto& [desc, name] : descs) {
    DType type = DType::float32;
    expect_shape(tensor_shape(desc, name, min_rank, max_rank, &type), first, name);
    same_dtype(type, name, *dtype, first_name, "one call");
  }
  return first;
}

// [n, c, everything after c]: activation (element-wise) and softmax (over c per position, or over c
// and space per n) mean the same on the flattened tensor, whatever its rank.
Shape flattened(const Shape& s) {
  Shape f{s[0], s[1], 1};
  for (size_t i = 2; i < s.size(); ++i) f[2] *= s[i];
  return f;
}

bool softmax_log(cudnnSoftmaxAlgorithm_t algo) {
  switch (algo) {
    case CUDNN_SOFTMAX_FAST:
    case CUDNN_SOFTMAX_ACCURATE: return false;  // the same function; out of core always the accurate way
    case CUDNN_SOFTMAX_LOG: return true;
    default: throw invalid_argument("algo: unknown softmax algorithm " + std::to_string(static_cast<int>(algo)));
  }
}

SoftmaxMode softmax_mode(cudnnSoftmaxMode_t mode) {
  switch (mode) {
    case CUDNN_SOFTMAX_MODE_CHANNEL: return SoftmaxMode::channel;
    case CUDNN_SOFTMAX_MODE_INSTANCE: return SoftmaxMode::instance;
    default: throw invalid_argument("mode: unknown softmax mode " + std::to_string(static_cast<int>(mode)));
  }
}

}  // namespace

Activation activation(cudnnActivationDescriptor_t desc) {
  const ActivationSetting a = activation_setting(desc, "activationDesc");
  switch (a.mode) {
    case CUDNN_ACTIVATION_SIGMOID: return {ActivationMode::sigmoid, 0};
    case CUDNN_ACTIVATION_RELU: return {ActivationMode::relu, 0};
    case CUDNN_ACTIVATION_TANH: return {ActivationMode::tanh, 0};
    case CUDNN_ACTIVATION_CLIPPED_RELU: return {ActivationMode::clipped_relu, a.coef};
    case CUDNN_ACTIVATION_ELU: return {ActivationMode::elu, a.coef};
    case CUDNN_ACTIVATION_SWISH: return {ActivationMode::swish, a.swish_beta};
    case CUDNN_ACTIVATION_IDENTITY:
      throw invalid_argument(
          "activationDesc: CUDNN_ACTIVATION_IDENTITY works only with cudnnConvolutionBiasActivationForward");
    default:
      throw invalid_argument("activationDesc has an unknown mode " + std::to_string(static_cast<int>(a.mode)));
  }
}

Pooling pooling(cudnnPoolingDescriptor_t desc, const Shape& x, double alpha, double beta, DType dtype) {
  const PoolingSetting s = pooling_setting(desc, x.size() - 2);
  PoolMode mode = PoolMode::max;
  switch (s.mode) {
    case CUDNN_POOLING_MAX:
    case CUDNN_POOLING_MAX_DETERMINISTIC: mode = PoolMode::max; break;
    case CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING: mode = PoolMode::avg; break;
    case CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING: mode = PoolMode::avg_exclude_pad; break;
    default: throw invalid_argument("poolingDesc has an unknown mode " + std::to_string(static_cast<int>(s.mode)));
  }
  for (size_t d = 0; d < s.window.size(); ++d)
    if (2 * s.padding[d] > s.window[d])
      throw not_supported("poolingDesc: padding " + format_shape(s.padding) + " exceeds half the window " +
                          format_shape(s.window) + "; pyooc pools with at most half a window of padding");
  Pooling p{ConvProblem{}, mode};
  try {
    p.problem = pool_problem(x, s.window, s.stride, s.padding, dtype);
  } catch (const std::invalid_argument& e) {  // the window does not fit the padded input
    throw invalid_argument(std::string("poolingDesc and xDesc: ") + e.what());
  }
  p.problem.alpha = alpha;
  p.problem.beta = beta;
  return p;
}

}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cudnnStatus_t ooc_cudnnAddTensor(cudnnHandle_t handle, const void* alpha,
                                            const cudnnTensorDescriptor_t aDesc, const void* A, const void* beta,
                                            const cudnnTensorDescriptor_t cDesc, void* C) {
  return guarded("ooc_cudnnAddTensor", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {A, "A"}, {beta, "beta"}, {C, "C"}});
    DType dtype = DType::float32, c_type = DType::float32;
    const Shape a = tensor_shape(aDesc, "aDesc", 4, 5, &dtype), c = tensor_shape(cDesc, "cDesc", 4, 5, &c_type);
    same_dtype(c_type, "cDesc", dtype, "aDesc", "one call");
    same_rank(a, "aDesc", c, "cDesc");
    for (size_t d = 0; d < a.size(); ++d)
      if (a[d] != 1 && a[d] != c[d])
        throw invalid_argument("aDesc is " + format_shape(a) + ": each dimension must be 1 or cDesc's " +
                               format_shape(c));
    return dispatch(
        "cudnnAddTensor", {{A, elements(a)}, {C, elements(c)}}, handle,
        [&] {
          if (dtype != DType::bfloat16) return cudnnAddTensor(handle, alpha, aDesc, A, beta, cDesc, C);
          // cuDNN documents cudnnAddTensor for float, half and double data, not bfloat16: the
          // library adds bfloat16 with its own kernel (cudnn_layers.hpp), here on the caller's
          // device memory, after waiting for the handle's stream as every library run does.
          add_tensor(a, c, scalar(alpha), A, scalar(beta), C, C, out_of_core_options(handle), nullptr, nullptr, dtype);
          return CUDNN_STATUS_SUCCESS;
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          add_tensor(a, c, scalar(alpha), A, scalar(beta), C, C, options, plan, stats, dtype);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnActivationForward(cudnnHandle_t handle, cudnnActivationDescriptor_t activationDesc,
                                                    const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                                    const void* x, const void* beta,
                                                    const cudnnTensorDescriptor_t yDesc, void* y) {
  return guarded("ooc_cudnnActivationForward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {x, "x"}, {beta, "beta"}, {y, "y"}});
    const Activation act = activation(activationDesc);
    DType dtype = DType::float32;
    const Shape s = common_shape({{xDesc, "xDesc"}, {yDesc, "yDesc"}}, kMinRank, kMaxRank, &dtype);
    const int64_t count = elements(s);
    return dispatch(
        "cudnnActivationForward", {{x, x == y ? 0 : count}, {y, count}}, handle,
        [&] { return cudnnActivationForward(handle, activationDesc, alpha, xDesc, x, beta, yDesc, y); },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          activation_forward(flattened(s), act.mode, act.coef, x, y, options, plan, stats, scalar(alpha),
                             scalar(beta), dtype);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnActivationBackward(cudnnHandle_t handle, cudnnActivationDescriptor_t activationDesc,
                                                     const void* alpha, const cudnnTensorDescriptor_t yDesc,
                                                     const void* y, const cudnnTensorDescriptor_t dyDesc,
                                                     const void* dy, const cudnnTensorDescriptor_t xDesc,
                                                     const void* x, const void* beta,
                                                     const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return guarded("ooc_cudnnActivationBackward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {y, "y"}, {dy, "dy"}, {x, "x"}, {beta, "beta"}, {dx, "dx"}});
    const Activation act = activation(activationDesc);
    DType dtype = DType::float32;
    const Shape s = common_shape({{yDesc, "yDesc"}, {dyDesc, "dyDesc"}, {xDesc, "xDesc"}, {dxDesc, "dxDesc"}},
                                 kMinRank, kMaxRank, &dtype);
    const int64_t count = elements(s);
    return dispatch(
        "cudnnActivationBackward", {{y, count}, {dy, dy == dx ? 0 : count}, {x, count}, {dx, count}}, handle,
        [&] {
          return cudnnActivationBackward(handle, activationDesc, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta, dxDesc,
                                         dx);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          activation_backward(flattened(s), act.mode, act.coef, y, dy, x, dx, options, plan, stats, scalar(alpha),
                              scalar(beta), dtype);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                                 const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,
                                                 const void* beta, const cudnnTensorDescriptor_t yDesc, void* y) {
  return guarded("ooc_cudnnPoolingForward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {x, "x"}, {beta, "beta"}, {y, "y"}});
    DType dtype = DType::float32, y_type = DType::float32;
    const Shape xs = tensor_shape(xDesc, "xDesc", 4, 5, &dtype), ys = tensor_shape(yDesc, "yDesc", 4, 5, &y_type);
    same_dtype(y_type, "yDesc", dtype, "xDesc", "one call");
    same_rank(ys, "yDesc", xs, "xDesc");
    const Pooling pool = pooling(poolingDesc, xs, scalar(alpha), scalar(beta), dtype);
    const ConvProblem& p = pool.problem;
    expect_shape(ys, p.y_shape(), "yDesc");
    return dispatch(
        "cudnnPoolingForward", {{x, p.x_elements()}, {y, p.y_elements()}}, handle,
        [&] { return cudnnPoolingForward(handle, poolingDesc, alpha, xDesc, x, beta, yDesc, y); },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          pool_forward(p, pool.mode, x, y, options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnPoolingBackward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                                  const void* alpha, const cudnnTensorDescriptor_t yDesc,
                                                  const void* y, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                                  const cudnnTensorDescriptor_t xDesc, const void* x,
                                                  const void* beta, const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return guarded("ooc_cudnnPoolingBackward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {y, "y"}, {dy, "dy"}, {x, "x"}, {beta, "beta"}, {dx, "dx"}});
    DType dtype = DType::float32, y_type = DType::float32;
    const Shape xs = common_shape({{xDesc, "xDesc"}, {dxDesc, "dxDesc"}}, 4, 5, &dtype);
    const Shape ys = common_shape({{yDesc, "yDesc"}, {dyDesc, "dyDesc"}}, 4, 5, &y_type);
    same_dtype(y_type, "yDesc", dtype, "xDesc", "one call");
    same_rank(ys, "yDesc", xs, "xDesc");
    const Pooling pool = pooling(poolingDesc, xs, scalar(alpha), scalar(beta), dtype);
    expect_shape(ys, pool.problem.y_shape(), "yDesc");
    const ConvProblem p = pool_backward_problem(pool.problem);
    return dispatch(
        "cudnnPoolingBackward", {{y, p.y_elements()}, {dy, p.y_elements()}, {x, p.x_elements()}, {dx, p.x_elements()}},
        handle,
        [&] {
          return cudnnPoolingBackward(handle, poolingDesc, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta, dxDesc, dx);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          pool_backward(p, pool.mode, y, dy, x, dx, options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                                 cudnnSoftmaxMode_t mode, const void* alpha,
                                                 const cudnnTensorDescriptor_t xDesc, const void* x, const void* beta,
                                                 const cudnnTensorDescriptor_t yDesc, void* y) {
  return guarded("ooc_cudnnSoftmaxForward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {x, "x"}, {beta, "beta"}, {y, "y"}});
    const bool log = softmax_log(algo);
    const SoftmaxMode over = softmax_mode(mode);
    DType dtype = DType::float32;
    const Shape s = common_shape({{xDesc, "xDesc"}, {yDesc, "yDesc"}}, kMinRank, kMaxRank, &dtype);
    const int64_t count = elements(s);
    return dispatch(
        "cudnnSoftmaxForward", {{x, x == y ? 0 : count}, {y, count}}, handle,
        [&] { return cudnnSoftmaxForward(handle, algo, mode, alpha, xDesc, x, beta, yDesc, y); },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          softmax_forward(flattened(s), over, log, x, y, options, plan, stats, scalar(alpha), scalar(beta), dtype);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                                  cudnnSoftmaxMode_t mode, const void* alpha,
                                                  const cudnnTensorDescriptor_t yDesc, const void* y,
                                                  const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                                  const void* beta, const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return guarded("ooc_cudnnSoftmaxBackward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {y, "y"}, {dy, "dy"}, {beta, "beta"}, {dx, "dx"}});
    const bool log = softmax_log(algo);
    const SoftmaxMode over = softmax_mode(mode);
    DType dtype = DType::float32;
    const Shape s =
        common_shape({{yDesc, "yDesc"}, {dyDesc, "dyDesc"}, {dxDesc, "dxDesc"}}, kMinRank, kMaxRank, &dtype);
    const int64_t count = elements(s);
    return dispatch(
        "cudnnSoftmaxBackward", {{y, count}, {dy, dy == dx ? 0 : count}, {dx, count}}, handle,
        [&] { return cudnnSoftmaxBackward(handle, algo, mode, alpha, yDesc, y, dyDesc, dy, beta, dxDesc, dx); },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          softmax_backward(flattened(s), over, log, y, dy, dx, options, plan, stats, scalar(alpha), scalar(beta),
                           dtype);
        });
  });
}
