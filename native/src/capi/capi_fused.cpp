// ooc_cudnn* fused entry points (ooc_cudnn.h): the library's fused functions (fused.hpp) behind
// cuDNN-style signatures. cuDNN has no single call for any of them, so they always run out of core
// (even with everything on the device): the point of each is that the intermediates it fuses away
// never cross the link. Arguments are checked first (before the handle is touched).
#include "capi/capi_internal.hpp"
#include "ooc/fused.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

// activationDesc as a fused function applies it: IDENTITY too (folding nothing in).
FusedActivation fused_activation(cudnnActivationDescriptor_t desc) {
  FusedActivation f;
  if (activation_setting(desc, "activationDesc").mode == CUDNN_ACTIVATION_IDENTITY) {
    f.identity = true;
    return f;
  }
  const Activation a = activation(desc);
  f.mode = a.mode;
  f.coef = a.coef;
  return f;
}

// x, w and the convolution's geometry, as every fused call reads them.
struct ConvInputs {
  Shape x, w;
  ConvGeometry geometry;
};

ConvInputs conv_inputs(cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
                       cudnnConvolutionDescriptor_t convDesc) {
  ConvInputs c{tensor_shape(xDesc, "xDesc"), filter_shape(wDesc, "wDesc"), {}};
  same_rank(c.w, "wDesc", c.x, "xDesc");
  c.geometry = conv_geometry(convDesc, c.x.size() - 2);
  return c;
}

ConvProblem forward_with_bias(const ConvInputs& c, double alpha1, double alpha2) {
  const ConvGeometry& g = c.geometry;
  return ConvProblem::forward(c.x, c.w, g.stride, g.padding, g.dilation, g.groups, alpha1, alpha2, true);
}

// z is read only when alpha2 != 0 (null allowed otherwise); bias is [1, K, 1...].
void check_z_and_bias(const void* alpha2, const void* z, cudnnTensorDescriptor_t zDesc, const void* bias,
                      cudnnTensorDescriptor_t biasDesc, const Shape& y, int64_t k) {
  require_pointer(bias, "bias");
  if (scalar(alpha2) != 0.0f) require_pointer(z, "z (read because alpha2 != 0)");
  if (z) expect_shape(tensor_shape(zDesc, "zDesc"), y, "zDesc");
  expect_shape(tensor_shape(biasDesc, "biasDesc"), bias_shape(y.size(), k), "biasDesc");
}

// The backward problem of (x, dy, w) with its gradients' descriptors checked: dx like x, dw like w,
// db [1, K, 1...]; the gradients are fresh (beta 0), as the fused backward computes them.
// dy_name: the descriptor's name in the call's signature.
ConvProblem backward_problem(const ConvInputs& c, cudnnTensorDescriptor_t dyDesc, const char* dy_name,
                             cudnnTensorDescriptor_t dxDesc, cudnnFilterDescriptor_t dwDesc,
                             cudnnTensorDescriptor_t dbDesc) {
  const Shape dy = tensor_shape(dyDesc, dy_name);
  same_rank(dy, dy_name, c.x, "xDesc");
  const ConvGeometry& g = c.geometry;
  const ConvProblem fwd = ConvProblem::forward(c.x, c.w, g.stride, g.padding, g.dilation, g.groups, 1.0, 0.0, false);
  expect_shape(dy, fwd.y_shape(), dy_name);
  expect_shape(tensor_shape(dxDesc, "dxDesc"), c.x, "dxDesc");
  expect_shape(filter_shape(dwDesc, "dwDesc"), c.w, "dwDesc");
  expect_shape(tensor_shape(dbDesc, "dbDesc"), bias_shape(dy.size(), c.w[0]), "dbDesc");
  return ConvProblem::backward_data(dy, c.w, c.x, g.stride, g.padding, g.dilation, g.groups, 1.0, 0.0);
}

// pre (the activation's input) is optional: null leaves preDesc unread.
void check_pre(const void* pre, cudnnTensorDescriptor_t preDesc, const Shape& y) {
  if (pre) expect_shape(tensor_shape(preDesc, "preDesc"), y, "preDesc");
}

// Every fused call runs chunked (as convDesc's math type says) and records its plan as the thread's last call.
template <typename Chunked>
cudnnStatus_t run_chunked(cudnnHandle_t handle, cudnnConvolutionDescriptor_t convDesc, Chunked chunked) {
  Plan plan;
  RunStats stats;
  chunked(out_of_core_options(handle, convDesc), &plan, &stats);
  record_plan_run(std::move(plan), stats);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace
}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cudnnStatus_t ooc_cudnnConvolutionBiasActivationPoolingForward(
    cudnnHandle_t handle, const void* alpha1, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const void* alpha2, const cudnnTensorDescriptor_t zDesc, const void* z, const cudnnTensorDescriptor_t biasDesc,
    const void* bias, const cudnnActivationDescriptor_t activationDesc, const cudnnPoolingDescriptor_t poolingDesc,
    const cudnnTensorDescriptor_t yDesc, void* y) {
  return guarded("ooc_cudnnConvolutionBiasActivationPoolingForward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha1, "alpha1"}, {x, "x"}, {w, "w"}, {alpha2, "alpha2"}, {y, "y"}});
    const FusedActivation act = fused_activation(activationDesc);
    const ConvProblem conv = forward_with_bias(conv_inputs(xDesc, wDesc, convDesc), scalar(alpha1), scalar(alpha2));
    check_z_and_bias(alpha2, z, zDesc, bias, biasDesc, conv.y_shape(), conv.k);
    const Pooling pool = pooling(poolingDesc, conv.y_shape(), 1.0, 0.0);
    const Shape ys = tensor_shape(yDesc, "yDesc");
    same_rank(ys, "yDesc", conv.y_shape(), "xDesc");
    expect_shape(ys, pool.problem.y_shape(), "yDesc (the pooled output)");
    return run_chunked(handle, convDesc, [&](const Options& options, Plan* plan, RunStats* stats) {
      conv_bias_activation_pooling_forward(conv, act, pool.problem, pool.mode, floats(x), floats(w), floats(z),
                                           floats(bias), floats(y), options, plan, stats);
    });
  });
}

extern "C" cudnnStatus_t ooc_cudnnDeconvolutionBiasActivationForward(
    cudnnHandle_t handle, const void* alpha1, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const void* alpha2, const cudnnTensorDescriptor_t zDesc, const void* z, const cudnnTensorDescriptor_t biasDesc,
    const void* bias, const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t yDesc,
    void* y) {
  return guarded("ooc_cudnnDeconvolutionBiasActivationForward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha1, "alpha1"}, {x, "x"}, {w, "w"}, {alpha2, "alpha2"}, {y, "y"}});
    const FusedActivation act = fused_activation(activationDesc);
    const ConvInputs c = conv_inputs(xDesc, wDesc, convDesc);
    const Shape ys = tensor_shape(yDesc, "yDesc");
    same_rank(ys, "yDesc", c.x, "xDesc");
    // y's extent beyond what the geometry gives is torch's output_padding (deconv_problem bounds it).
    const ConvGeometry& g = c.geometry;
    Shape output_padding(c.x.size() - 2);
    for (size_t d = 0; d < output_padding.size(); ++d)
      output_padding[d] = ys[d + 2] - ((c.x[d + 2] - 1) * g.stride[d] - 2 * g.padding[d] +
                                       g.dilation[d] * (c.w[d + 2] - 1) + 1);
    ConvProblem p;
    try {
      p = deconv_problem(c.x, c.w, g.stride, g.padding, output_padding, g.dilation, g.groups, scalar(alpha1), scalar(alpha2),
                         true);
    } catch (const std::invalid_argument& e) {
      throw invalid_argument(std::string("yDesc ") + format_shape(ys) + " is no transposed convolution of xDesc " +
                             format_shape(c.x) + " and wDesc " + format_shape(c.w) + ": " + e.what());
    }
    expect_shape(ys, p.x_shape(), "yDesc");
    check_z_and_bias(alpha2, z, zDesc, bias, biasDesc, ys, ys[1]);
    return run_chunked(handle, convDesc, [&](const Options& options, Plan* plan, RunStats* stats) {
      deconv_bias_activation_forward(p, act, floats(x), floats(w), floats(z), floats(bias), floats(y), options, plan,
                                     stats);
    });
  });
}

extern "C" cudnnStatus_t ooc_cudnnConvolutionBackwardDataFilterBias(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t dyDesc,
    const void* dy, const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t dxDesc, void* dx, const cudnnFilterDescriptor_t dwDesc, void* dw,
    const cudnnTensorDescriptor_t dbDesc, void* db) {
  return guarded("ooc_cudnnConvolutionBackwardDataFilterBias", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{x, "x"}, {dy, "dy"}, {w, "w"}, {dx, "dx"}, {dw, "dw"}, {db, "db"}});
    const ConvProblem p = backward_problem(conv_inputs(xDesc, wDesc, convDesc), dyDesc, "dyDesc", dxDesc, dwDesc, dbDesc);
    return run_chunked(handle, convDesc, [&](const Options& options, Plan* plan, RunStats* stats) {
      conv_backward_data_filter_bias(p, floats(x), floats(dy), floats(w), floats(dx), floats(dw), floats(db), options,
                                     plan, stats);
    });
  });
}

extern "C" cudnnStatus_t ooc_cudnnActivationConvolutionBackwardDataFilterBias(
    cudnnHandle_t handle, const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t xDesc,
    const void* x, const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, const void* y, const cudnnTensorDescriptor_t preDesc, const void* pre,
    const cudnnTensorDescriptor_t dyDesc, const void* dy, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnFilterDescriptor_t dwDesc, void* dw, const cudnnTensorDescriptor_t dbDesc, void* db) {
  return guarded("ooc_cudnnActivationConvolutionBackwardDataFilterBias", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{x, "x"}, {dy, "dy"}, {w, "w"}, {dx, "dx"}, {dw, "dw"}, {db, "db"}});
    const FusedActivation act = fused_activation(activationDesc);
    const ConvProblem p = backward_problem(conv_inputs(xDesc, wDesc, convDesc), dyDesc, "dyDesc", dxDesc, dwDesc, dbDesc);
    const Shape ys = p.y_shape();
    if (!act.identity) {  // identity folds nothing in: y and pre unread
      require_pointer(y, "y");
      expect_shape(tensor_shape(yDesc, "yDesc"), ys, "yDesc");
      check_pre(pre, preDesc, ys);
    }
    return run_chunked(handle, convDesc, [&](const Options& options, Plan* plan, RunStats* stats) {
      activation_conv_backward_data_filter_bias(p, act, floats(x), floats(dy), floats(w), floats(y), floats(pre),
                                                floats(dx), floats(dw), floats(db), options, plan, stats);
    });
  });
}

extern "C" cudnnStatus_t ooc_cudnnPoolingActivationConvolutionBackwardDataFilterBias(
    cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc, const cudnnActivationDescriptor_t activationDesc,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, const void* y,
    const cudnnTensorDescriptor_t preDesc, const void* pre, const cudnnTensorDescriptor_t qDesc, const void* q,
    const cudnnTensorDescriptor_t dqDesc, const void* dq, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnFilterDescriptor_t dwDesc, void* dw, const cudnnTensorDescriptor_t dbDesc, void* db) {
  return guarded("ooc_cudnnPoolingActivationConvolutionBackwardDataFilterBias", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{x, "x"}, {w, "w"}, {y, "y"}, {q, "q"}, {dq, "dq"}, {dx, "dx"}, {dw, "dw"}, {db, "db"}});
    const FusedActivation act = fused_activation(activationDesc);
    // y is the pooling's input, so y's descriptor stands for the convolution's dy.
    const ConvProblem p = backward_problem(conv_inputs(xDesc, wDesc, convDesc), yDesc, "yDesc", dxDesc, dwDesc, dbDesc);
    const Shape ys = p.y_shape();
    if (!act.identity) check_pre(pre, preDesc, ys);
    const Pooling pool = pooling(poolingDesc, ys, 1.0, 0.0);
    expect_shape(tensor_shape(qDesc, "qDesc"), pool.problem.y_shape(), "qDesc");
    expect_shape(tensor_shape(dqDesc, "dqDesc"), pool.problem.y_shape(), "dqDesc");
    return run_chunked(handle, convDesc, [&](const Options& options, Plan* plan, RunStats* stats) {
      pooling_activation_conv_backward_data_filter_bias(p, act, pool.problem, pool.mode, floats(x), floats(dq),
                                                        floats(w), floats(q), floats(y), floats(pre), floats(dx),
                                                        floats(dw), floats(db), options, plan, stats);
    });
  });
}
