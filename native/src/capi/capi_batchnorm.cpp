// ooc_cudnnBatchNormalization*: cuDNN's batch normalization over device, pinned or pageable memory,
// mapped onto the library's batch norm (layers.hpp). The library keeps the per-channel tensors on
// the host, so out of core they are copied from and back to the caller's memory of any kind. x, y, dy
// and dx may be CUDNN_DATA_FLOAT, _HALF or _BFLOAT16 (one type a call); the per-channel descriptor
// is CUDNN_DATA_FLOAT whatever x is, as cuDNN requires for half x. They may be packed NHWC too (one
// layout a call) in the spatial modes: that memory is [N * space, C] rows, whose batch norm per
// channel over every row is the spatial one.
#include <cmath>

#include "capi/capi_internal.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

// What the library normalizes for a cuDNN mode: spatial modes normalize x per channel over N and
// space (for NHWC memory: x seen as [N * space, C]); per-activation normalizes each (c, position)
// over N, which is spatial normalization of x seen as [N, C * space] (packed NCHW: the same memory).
struct Layout {
  Shape library;     // the library's x
  Shape params;      // the per-channel descriptor's dims
  int64_t channels;  // floats in each per-channel tensor
};

Layout layout(cudnnBatchNormMode_t mode, const Shape& x, ooc::Layout memory) {
  Layout l;
  switch (mode) {
    case CUDNN_BATCHNORM_SPATIAL:
    case CUDNN_BATCHNORM_SPATIAL_PERSISTENT:  // a faster cuDNN kernel of the same function
      l.library = memory == ooc::Layout::channels_last ? Shape{elements(x) / x[1], x[1]} : x;
      l.params = Shape(x.size(), 1);
      l.params[1] = x[1];
      break;
    case CUDNN_BATCHNORM_PER_ACTIVATION:
      if (memory == ooc::Layout::channels_last)
        throw not_supported("mode: CUDNN_BATCHNORM_PER_ACTIVATION takes fully-packed NCHW tensors only (NHWC: the "
                            "spatial modes)");
      l.params = x;
      l.params[0] = 1;
      l.library = {x[0], elements(x) / x[0]};
      break;
    default: throw invalid_argument("mode: unknown batch-norm mode " + std::to_string(static_cast<int>(mode)));
  }
  l.channels = elements(l.params);
  return l;
}

void check_epsilon(double epsilon) {
  if (!(epsilon >= CUDNN_BN_MIN_EPSILON) || !std::isfinite(epsilon))
    throw invalid_argument("epsilon must be finite and at least CUDNN_BN_MIN_EPSILON, got " + std::to_string(epsilon));
  if (epsilon == 0) throw not_supported("epsilon is 0; pyooc normalizes with a positive epsilon");
}

void both_or_neither(const void* a, const char* a_name, const void* b, const char* b_name) {
  if (!a != !b) throw invalid_argument(std::string(a_name) + " and " + b_name + " must both be given or both be null");
}

ConvProblem problem(Operation op, const Layout& l, double alpha, double beta, DType dtype) {
  ConvProblem p = batchnorm_problem(op, l.library, dtype);
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

// A call's checked geometry: x and the descriptors that must describe it alike, the per-channel
// descriptor against the mode's layout, and the library's problem blending y (dx) by alpha, beta.
struct Geometry {
  Layout layout;
  ConvProblem problem;
  int64_t count = 0;     // x's elements
  int64_t channels = 0;  // each per-channel tensor's
};

Geometry geometry(Operation op, cudnnBatchNormMode_t mode,
                  std::initializer_list<std::pair<cudnnTensorDescriptor_t, const char*>> like_x,
                  cudnnTensorDescriptor_t params_desc, const char* params_name, const void* alpha, const void* beta) {
  // x's descriptor first: the others must describe it alike, in dims, type and layout.
  const char* x_name = like_x.begin()->second;
  Shape x;
  DType dtype = DType::float32;
  std::vector<std::pair<LayoutSet, const char*>> layouts;
  for (const auto& [desc, name] : like_x) {
    DType type = DType::float32;
    LayoutSet set;
    const Shape shape = tensor_shape(desc, name, 4, 5, &type, &set);
    if (layouts.empty()) {
      x = shape;
      dtype = type;
    }
    expect_shape(shape, x, name);
    same_dtype(type, name, dtype, x_name, "one call");
    layouts.emplace_back(set, name);
  }
  Geometry g;
  g.layout = layout(mode, x, common_layout(layouts, "batch normalization"));
  expect_shape(tensor_shape(params_desc, params_name), g.layout.params, params_name);  // float only
  g.problem = problem(op, g.layout, scalar(alpha), scalar(beta), dtype);
  g.count = elements(x);
  g.channels = g.layout.channels;
  return g;
}

// The forward calls' (training and inference): x, y and the per-channel descriptor, checked with
// epsilon.
Geometry forward_geometry(Operation op, cudnnBatchNormMode_t mode, cudnnTensorDescriptor_t xDesc,
                          cudnnTensorDescriptor_t yDesc, cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
                          const void* alpha, const void* beta, double epsilon) {
  check_epsilon(epsilon);
  return geometry(op, mode, {{xDesc, "xDesc"}, {yDesc, "yDesc"}}, bnScaleBiasMeanVarDesc, "bnScaleBiasMeanVarDesc",
                  alpha, beta);
}

}  // namespace
}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cudnnStatus_t ooc_cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc, void* y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale, const void* bnBias,
    double exponentialAverageFactor, void* resultRunningMean, void* resultRunningVariance, double epsilon,
    void* resultSaveMean, void* resultSaveInvVariance) {
  return guarded("ooc_cudnnBatchNormalizationForwardTraining", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {beta, "beta"}, {x, "x"}, {y, "y"}, {bnScale, "bnScale"}, {bnBias, "bnBias"}});
    both_or_neither(resultRunningMean, "resultRunningMean", resultRunningVariance, "resultRunningVariance");
    both_or_neither(resultSaveMean, "resultSaveMean", resultSaveInvVariance, "resultSaveInvVariance");
    const Geometry g = forward_geometry(Operation::batchnorm_forward_training, mode, xDesc, yDesc,
                                        bnScaleBiasMeanVarDesc, alpha, beta, epsilon);
    const int64_t count = g.count, C = g.channels;
    return dispatch(
        "cudnnBatchNormalizationForwardTraining",
        {{x, count}, {y, count}, {bnScale, C}, {bnBias, C}, {resultRunningMean, C}, {resultRunningVariance, C},
         {resultSaveMean, C}, {resultSaveInvVariance, C}},
        handle,
        [&] {
          return cudnnBatchNormalizationForwardTraining(handle, mode, alpha, beta, xDesc, x, yDesc, y,
                                                        bnScaleBiasMeanVarDesc, bnScale, bnBias,
                                                        exponentialAverageFactor, resultRunningMean,
                                                        resultRunningVariance, epsilon, resultSaveMean,
                                                        resultSaveInvVariance);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          // The library reads and writes the per-channel tensors in any memory
          // (api/host_channel_vectors.hpp); the saved statistics cuDNN makes optional it always
          // writes, here into scratch.
          std::vector<float> unsaved(resultSaveMean ? 0 : 2 * static_cast<size_t>(C));
          float* saved_mean = resultSaveMean ? static_cast<float*>(resultSaveMean) : unsaved.data();
          float* saved_invstd = resultSaveMean ? static_cast<float*>(resultSaveInvVariance) : unsaved.data() + C;
          batchnorm_forward_training(g.problem, x, static_cast<const float*>(bnScale),
                                     static_cast<const float*>(bnBias), epsilon, exponentialAverageFactor,
                                     static_cast<float*>(resultRunningMean), static_cast<float*>(resultRunningVariance),
                                     y, saved_mean, saved_invstd, options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc, void* y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale, const void* bnBias,
    const void* estimatedMean, const void* estimatedVariance, double epsilon) {
  return guarded("ooc_cudnnBatchNormalizationForwardInference", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alpha, "alpha"}, {beta, "beta"}, {x, "x"}, {y, "y"}, {bnScale, "bnScale"}, {bnBias, "bnBias"},
                      {estimatedMean, "estimatedMean"}, {estimatedVariance, "estimatedVariance"}});
    const Geometry g = forward_geometry(Operation::batchnorm_forward_inference, mode, xDesc, yDesc,
                                        bnScaleBiasMeanVarDesc, alpha, beta, epsilon);
    const int64_t count = g.count, C = g.channels;
    return dispatch(
        "cudnnBatchNormalizationForwardInference",
        {{x, count}, {y, count}, {bnScale, C}, {bnBias, C}, {estimatedMean, C}, {estimatedVariance, C}}, handle,
        [&] {
          return cudnnBatchNormalizationForwardInference(handle, mode, alpha, beta, xDesc, x, yDesc, y,
                                                         bnScaleBiasMeanVarDesc, bnScale, bnBias, estimatedMean,
                                                         estimatedVariance, epsilon);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          batchnorm_forward_inference(g.problem, x, static_cast<const float*>(bnScale),
                                      static_cast<const float*>(bnBias), static_cast<const float*>(estimatedMean),
                                      static_cast<const float*>(estimatedVariance), epsilon, y, options, plan, stats);
        });
  });
}

extern "C" cudnnStatus_t ooc_cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alphaDataDiff, const void* betaDataDiff,
    const void* alphaParamDiff, const void* betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* dy, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScale, void* dBnScaleResult, void* dBnBiasResult,
    double epsilon, const void* savedMean, const void* savedInvVariance) {
  return guarded("ooc_cudnnBatchNormalizationBackward", [&]() -> cudnnStatus_t {
    check_handle(handle);
    require_pointers({{alphaDataDiff, "alphaDataDiff"}, {betaDataDiff, "betaDataDiff"},
                      {alphaParamDiff, "alphaParamDiff"}, {betaParamDiff, "betaParamDiff"}, {x, "x"}, {dy, "dy"},
                      {dx, "dx"}, {bnScale, "bnScale"}, {dBnScaleResult, "dBnScaleResult"},
                      {dBnBiasResult, "dBnBiasResult"}});
    both_or_neither(savedMean, "savedMean", savedInvVariance, "savedInvVariance");
    check_epsilon(epsilon);
    const Geometry g = geometry(Operation::batchnorm_backward, mode,
                                {{xDesc, "xDesc"}, {dyDesc, "dyDesc"}, {dxDesc, "dxDesc"}}, dBnScaleBiasDesc,
                                "dBnScaleBiasDesc", alphaDataDiff, betaDataDiff);
    const int64_t count = g.count, C = g.channels;
    return dispatch(
        "cudnnBatchNormalizationBackward",
        {{x, count}, {dy, count}, {dx, dx == dy ? 0 : count}, {bnScale, C}, {dBnScaleResult, C}, {dBnBiasResult, C},
         {savedMean, C}, {savedInvVariance, C}},
        handle,
        [&] {
          return cudnnBatchNormalizationBackward(handle, mode, alphaDataDiff, betaDataDiff, alphaParamDiff,
                                                 betaParamDiff, xDesc, x, dyDesc, dy, dxDesc, dx, dBnScaleBiasDesc,
                                                 bnScale, dBnScaleResult, dBnBiasResult, epsilon, savedMean,
                                                 savedInvVariance);
        },
        [&](const Options& options, Plan* plan, RunStats* stats) {
          const std::vector<float> scale = read_floats(bnScale, C);
          std::vector<float> mean(static_cast<size_t>(C)), invstd(static_cast<size_t>(C));
          RunStats statistics;
          if (savedMean) {
            mean = read_floats(savedMean, C);
            invstd = read_floats(savedInvVariance, C);
          } else {  // recomputed from x, as cuDNN does without them: one more pass over x
            const std::vector<float> no_bias(static_cast<size_t>(C), 0.0f);
            batchnorm_forward_training(problem(Operation::batchnorm_forward_training, g.layout, 1.0, 0.0,
                                               g.problem.dtype),
                                       x, scale.data(), no_bias.data(), epsilon, 0.0, nullptr, nullptr, nullptr,
                                       mean.data(), invstd.data(), options, nullptr, &statistics);
          }
          std::vector<float> dscale(static_cast<size_t>(C)), dbias(static_cast<size_t>(C));
          batchnorm_backward(g.problem, x, dy, scale.data(), mean.data(), invstd.data(), dx,
                             dscale.data(), dbias.data(), options, plan, stats);
          accumulate(*stats, statistics, RunsWere::sequential);
          // The parameter gradients blend like the data gradient, with their own alpha and beta.
          const double a = scalar(alphaParamDiff), b = scalar(betaParamDiff);
          for (auto [result, values] : {std::pair{dBnScaleResult, &dscale}, std::pair{dBnBiasResult, &dbias}}) {
            const std::vector<float> old = b != 0.0 ? read_floats(result, C) : std::vector<float>{};
            for (size_t c = 0; c < values->size(); ++c)
              (*values)[c] = static_cast<float>(a * (*values)[c] + (b != 0.0 ? b * old[c] : 0.0));
            write_floats(result, *values);
          }
        });
  });
}
