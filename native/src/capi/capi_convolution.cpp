// ooc_cudnnConvolution*: cuDNN's convolution entry points over device, pinned or pageable memory.
// Each checks its arguments first (before the handle is touched), then either calls cuDNN itself
// (everything on the device and within the memory limit) or runs the out-of-core path.

#include "capi/capi_internal.hpp"
#include "ooc/fused.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

// The shapes a convolution's descriptors give, by role: x (or dx), w (or dw), y (or dy), each
// descriptor named as the entry point names it; ranks checked against x's, and the geometry of
// convDesc over x's spatial dimensions.
struct ConvShapes {
  Shape x, w, y;
  ConvGeometry geometry;
  DType dtype = DType::float32;  // of all three (float32, float16 or bfloat16; cuDNN computes half in float32)
  Layout layout = Layout::channels_first;  // of all three: packed NCHW, or NHWC with an NHWC filter
};

ConvShapes conv_shapes(cudnnTensorDescriptor_t x_desc, const char* x_name, cudnnFilterDescriptor_t w_desc,
                       const char* w_name, cudnnTensorDescriptor_t y_desc, const char* y_name,
                       cudnnConvolutionDescriptor_t convDesc) {
  ConvShapes s;
  DType w_type = DType::float32, y_type = DType::float32;
  LayoutSet x_layouts, w_layouts, y_layouts;
  s.x = tensor_shape(x_desc, x_name, 4, 5, &s.dtype, &x_layouts);
  s.w = filter_shape(w_desc, w_name, &w_type, &w_layouts);
  s.y = tensor_shape(y_desc, y_name, 4, 5, &y_type, &y_layouts);
  same_dtype(w_type, w_name, s.dtype, x_name, "one convolution");
  same_dtype(y_type, y_name, s.dtype, x_name, "one convolution");
  same_rank(s.w, w_name, s.x, x_name);
  same_rank(s.y, y_name, s.x, x_name);
  s.layout = common_layout({{x_layouts, x_name}, {w_layouts, w_name}, {y_layouts, y_name}}, "one convolution");
  s.geometry = conv_geometry(convDesc, s.x.size() - 2);
  return s;
}

ConvProblem forward_problem(cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
                            cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc, double alpha,
                            double beta, bool has_bias) {
  const ConvShapes s = conv_shapes(xDesc, "xDesc", wDesc, "wDesc", yDesc, "yDesc", convDesc);
  const ConvGeometry& g = s.geometry;
  if (has_bias && s.dtype != DType::float32)
    throw not_supported(std::string("xDesc: ooc_cudnnConvolutionBiasActivationForward supports CUDNN_DATA_FLOAT only, "
                                    "got ") + dtype_name(s.dtype));
  if (has_bias && s.layout != Layout::channels_first)
    throw not_supported("xDesc: ooc_cudnnConvolutionBiasActivationForward supports NCHW tensors only so far");
  ConvProblem p =
      ConvProblem::forward(s.x, s.w, g.stride, g.padding, g.dilation, g.groups, alpha, beta, has_bias, s.dtype);
  p.layout = s.layout;
  expect_shape(s.y, p.y_shape(), "yDesc");
  return p;
}

}  // namespace

Shape bias_shape(size_t rank, int64_t k) {
  Shape s(rank, 1);
  s[1] = k;
  return s;
}

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
    return dispatch_conv(
        "cudnnConvolutionForward", {{x, p.x_elements()}, {w, p.w_elements()}, {y, p.y_elements()}}, handle, convDesc,
        [&] {
          return cudnnConvolutionForward(handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                         workSpaceSizeInBytes, beta, yDesc, y);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_forward(p, x, w, nullptr, y, options, plan, stats);
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
    const ActivationSetting act = activation_setting(activationDesc, "activationDesc");
    const cudnnActivationMode_t mode = act.mode;
    if (mode != CUDNN_ACTIVATION_RELU && mode != CUDNN_ACTIVATION_IDENTITY)
      throw not_supported("activationDesc: only CUDNN_ACTIVATION_RELU and CUDNN_ACTIVATION_IDENTITY are supported");
    const ConvProblem p = forward_problem(xDesc, wDesc, convDesc, yDesc, scalar(alpha1), scalar(alpha2), true);
    expect_shape(tensor_shape(zDesc, "zDesc"), p.y_shape(), "zDesc");
    expect_shape(tensor_shape(biasDesc, "biasDesc"), bias_shape(p.y_shape().size(), p.k), "biasDesc");
    return dispatch_conv(
        "cudnnConvolutionBiasActivationForward",
        {{x, p.x_elements()}, {w, p.w_elements()}, {z, z == y ? 0 : p.y_elements()}, {bias, p.k}, {y, p.y_elements()}},
        handle, convDesc,
        [&] {
          return cudnnConvolutionBiasActivationForward(handle, alpha1, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                                       workSpaceSizeInBytes, alpha2, zDesc, z, biasDesc, bias,
                                                       activationDesc, yDesc, y);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          // One pass: z is read as each y tile's start, bias and the activation are applied on the
          // device before the tile leaves (fused.hpp); z may be y.
          FusedActivation fused;
          fused.identity = mode == CUDNN_ACTIVATION_IDENTITY;
          conv_bias_activation_forward(p, fused, floats(x), floats(w), floats(z), floats(bias), floats(y), options,
                                       plan, stats);
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
    const ConvShapes s = conv_shapes(dxDesc, "dxDesc", wDesc, "wDesc", dyDesc, "dyDesc", convDesc);
    const ConvGeometry& g = s.geometry;
    ConvProblem p = ConvProblem::backward_data(s.y, s.w, s.x, g.stride, g.padding, g.dilation, g.groups,
                                               scalar(alpha), scalar(beta), s.dtype);
    p.layout = s.layout;
    return dispatch_conv(
        "cudnnConvolutionBackwardData", {{w, p.w_elements()}, {dy, p.y_elements()}, {dx, p.x_elements()}}, handle, convDesc,
        [&] {
          return cudnnConvolutionBackwardData(handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace,
                                              workSpaceSizeInBytes, beta, dxDesc, dx);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_backward_data(p, dy, w, dx, options, plan, stats);
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
    const ConvShapes s = conv_shapes(xDesc, "xDesc", dwDesc, "dwDesc", dyDesc, "dyDesc", convDesc);
    const ConvGeometry& g = s.geometry;
    ConvProblem p = ConvProblem::backward_filter(s.x, s.y, s.w, g.stride, g.padding, g.dilation, g.groups,
                                                 scalar(alpha), scalar(beta), s.dtype);
    p.layout = s.layout;
    return dispatch_conv(
        "cudnnConvolutionBackwardFilter", {{x, p.x_elements()}, {dy, p.y_elements()}, {dw, p.w_elements()}}, handle, convDesc,
        [&] {
          return cudnnConvolutionBackwardFilter(handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace,
                                                workSpaceSizeInBytes, beta, dwDesc, dw);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_backward_filter(p, x, dy, dw, options, plan, stats);
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
    DType dtype = DType::float32, db_type = DType::float32;
    LayoutSet dy_layouts;
    const Shape dys = tensor_shape(dyDesc, "dyDesc", 4, 5, &dtype, &dy_layouts);
    expect_shape(tensor_shape(dbDesc, "dbDesc", 4, 5, &db_type), bias_shape(dys.size(), dys[1]), "dbDesc");
    same_dtype(db_type, "dbDesc", dtype, "dyDesc", "one call");
    ConvProblem p = ConvProblem::backward_bias(dys, scalar(alpha), scalar(beta), dtype);
    p.layout = common_layout({{dy_layouts, "dyDesc"}}, "one call");
    return dispatch(
        "cudnnConvolutionBackwardBias", {{dy, p.y_elements()}, {db, p.k}}, handle,
        [&] { return cudnnConvolutionBackwardBias(handle, alpha, dyDesc, dy, beta, dbDesc, db); },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          conv_backward_bias(p, dy, db, options, plan, stats);
        });
  });
}
