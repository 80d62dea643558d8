// The layer entry points of the C API (ooc_cudnnAddTensor, Activation*, Pooling*, Softmax*) without
// a GPU: their signatures are cuDNN's own, argument checking and status codes, and the out-of-core
// path's numerics through the host backend against float64 references, under budgets that split
// every call, with alpha/beta blends and NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <cmath>
#include <random>
#include <type_traits>

#include "capi_fixtures.hpp"
#include "capi_references.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cublas.h"

// Every entry point has exactly the signature of the call it replaces.
#define OOC_SAME_SIGNATURE(f) static_assert(std::is_same_v<decltype(ooc_##f), decltype(f)>, "ooc_" #f " is not " #f)
OOC_SAME_SIGNATURE(cudnnConvolutionForward);
OOC_SAME_SIGNATURE(cudnnConvolutionBiasActivationForward);
OOC_SAME_SIGNATURE(cudnnConvolutionBackwardData);
OOC_SAME_SIGNATURE(cudnnConvolutionBackwardFilter);
OOC_SAME_SIGNATURE(cudnnConvolutionBackwardBias);
OOC_SAME_SIGNATURE(cudnnAddTensor);
OOC_SAME_SIGNATURE(cudnnActivationForward);
OOC_SAME_SIGNATURE(cudnnActivationBackward);
OOC_SAME_SIGNATURE(cudnnPoolingForward);
OOC_SAME_SIGNATURE(cudnnPoolingBackward);
OOC_SAME_SIGNATURE(cudnnSoftmaxForward);
OOC_SAME_SIGNATURE(cudnnSoftmaxBackward);
OOC_SAME_SIGNATURE(cudnnBatchNormalizationForwardTraining);
OOC_SAME_SIGNATURE(cudnnBatchNormalizationForwardInference);
OOC_SAME_SIGNATURE(cudnnBatchNormalizationBackward);
OOC_SAME_SIGNATURE(cublasSgemm);  // cublas_v2.h: cublasSgemm_v2
OOC_SAME_SIGNATURE(cudaFree);
OOC_SAME_SIGNATURE(cudaMemcpy);
OOC_SAME_SIGNATURE(cudaMemset);
OOC_SAME_SIGNATURE(cudaMemcpyAsync);
OOC_SAME_SIGNATURE(cudaMemsetAsync);
OOC_SAME_SIGNATURE(cudaFreeHost);
OOC_SAME_SIGNATURE(cudaMemGetInfo);
OOC_SAME_SIGNATURE(cublasSaxpy);  // cublas_v2.h: the _v2 forms
OOC_SAME_SIGNATURE(cublasSscal);
OOC_SAME_SIGNATURE(cublasScopy);
OOC_SAME_SIGNATURE(cublasSdot);
OOC_SAME_SIGNATURE(cublasSnrm2);
OOC_SAME_SIGNATURE(cublasSgemv);
// Overloaded in C++ (the T** conveniences, test_capi_cpp_conveniences.cpp): the C signature is one of them.
#define OOC_HAS_C_SIGNATURE(f)                                                                         \
  static_assert(std::is_same_v<decltype(static_cast<decltype(&f)>(&ooc_##f)), decltype(&f)>, \
                "ooc_" #f " lacks " #f "'s signature")
OOC_HAS_C_SIGNATURE(cudaMalloc);
OOC_HAS_C_SIGNATURE(cudaMallocHost);

namespace {

using namespace ooc_test;

const cudnnHandle_t kHandle = dummy_handle();

struct Scaling {
  float alpha, beta;
};
// Plain (the output never read) and blended (the output read and scaled).
const Scaling kScalings[] = {{1.0f, 0.0f}, {-0.75f, 0.5f}};

std::string scaling_name(const Scaling& s) {
  return "alpha " + std::to_string(s.alpha) + ", beta " + std::to_string(s.beta);
}

// What an output holds before the call: old values to blend when beta != 0, else NaN poison that
// every element must overwrite.
std::vector<float> old_output(size_t count, float beta, std::mt19937& rng) {
  return beta != 0.0f ? random_vector(count, rng) : std::vector<float>(count, std::nanf(""));
}

// Runs call(out) on an output that starts as old_output(r.size(), s.beta), then checks it holds
// alpha * r + beta * old and that the call ran split.
template <typename Call>
void expect_blend(const Call& call, const std::vector<double>& r, const Scaling& s, std::mt19937& rng,
                  const std::string& what) {
  const auto old = old_output(r.size(), s.beta, rng);
  std::vector<float> out = old;
  ASSERT_EQ(call(out.data()), CUDNN_STATUS_SUCCESS) << last_error();
  expect_close(out, blended(r, s.alpha, s.beta, old), what);
  expect_split_run(what);
}

// [n, c, everything else]: the shape the C API hands the library for element-wise ops and softmax.
Shape flat(const Shape& s) { return {s[0], s[1], product(s) / (s[0] * s[1])}; }

size_t count_of(const Shape& s) { return static_cast<size_t>(product(s)); }

// --- argument checks ---

class CapiLayerArgs : public HostBackendTest {
 protected:
  const Shape shape{2, 3, 6, 5};
  Tensor xd = tensor(shape);
  std::vector<float> x = std::vector<float>(count_of(shape), 0.5f), y = x, dy = x, dx = x;
  float one = 1.0f, zero = 0.0f;
  Activation relu = activation(CUDNN_ACTIVATION_RELU);
  Pooling max2 = pooling(CUDNN_POOLING_MAX, {2, 2}, {0, 0}, {2, 2});
  Tensor pooled_d = tensor({2, 3, 3, 2});

  cudnnStatus_t act_fwd(cudnnActivationDescriptor_t a, cudnnTensorDescriptor_t xdesc, cudnnTensorDescriptor_t ydesc,
                        const void* xp = nullptr, void* yp = nullptr) {
    return ooc_cudnnActivationForward(kHandle, a, &one, xdesc, xp ? xp : x.data(), &zero, ydesc, yp ? yp : y.data());
  }
  cudnnStatus_t pool_fwd(cudnnPoolingDescriptor_t p, cudnnTensorDescriptor_t xdesc, cudnnTensorDescriptor_t ydesc) {
    return ooc_cudnnPoolingForward(kHandle, p, &one, xdesc, x.data(), &zero, ydesc, y.data());
  }
  cudnnStatus_t softmax_fwd(cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode, cudnnTensorDescriptor_t ydesc) {
    return ooc_cudnnSoftmaxForward(kHandle, algo, mode, &one, xd.get(), x.data(), &zero, ydesc, y.data());
  }
};

TEST_F(CapiLayerArgs, NullHandleIsBadParamForEveryLayerEntryPoint) {
  const cudnnStatus_t bad = CUDNN_STATUS_BAD_PARAM;
  EXPECT_EQ(ooc_cudnnAddTensor(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), bad);
  EXPECT_EQ(ooc_cudnnActivationForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), bad);
  EXPECT_EQ(ooc_cudnnActivationBackward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, nullptr, nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnPoolingForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), bad);
  EXPECT_EQ(ooc_cudnnPoolingBackward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     nullptr, nullptr, nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnSoftmaxForward(nullptr, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, nullptr, nullptr,
                                    nullptr, nullptr, nullptr, nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnSoftmaxBackward(nullptr, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, nullptr, nullptr,
                                     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnBatchNormalizationForwardTraining(nullptr, CUDNN_BATCHNORM_SPATIAL, nullptr, nullptr, nullptr,
                                                       nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0.1,
                                                       nullptr, nullptr, 1e-5, nullptr, nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnBatchNormalizationForwardInference(nullptr, CUDNN_BATCHNORM_SPATIAL, nullptr, nullptr, nullptr,
                                                        nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        nullptr, 1e-5),
            bad);
  EXPECT_EQ(ooc_cudnnBatchNormalizationBackward(nullptr, CUDNN_BATCHNORM_SPATIAL, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, 1e-5, nullptr, nullptr),
            bad);
  // Also with everything else valid: the handle is checked, not assumed.
  EXPECT_EQ(ooc_cudnnActivationForward(nullptr, relu.get(), &one, xd.get(), x.data(), &zero, xd.get(), y.data()), bad);
  EXPECT_TRUE(names_argument(last_error(), "handle")) << last_error();
}

TEST_F(CapiLayerArgs, NullPointersAreBadParamAndNamed) {
  EXPECT_EQ(ooc_cudnnActivationForward(kHandle, relu.get(), nullptr, xd.get(), x.data(), &zero, xd.get(), y.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "alpha")) << last_error();
  EXPECT_EQ(act_fwd(relu.get(), xd.get(), xd.get(), nullptr, nullptr), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(ooc_cudnnActivationForward(kHandle, relu.get(), &one, xd.get(), nullptr, &zero, xd.get(), y.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "x")) << last_error();
  EXPECT_EQ(ooc_cudnnActivationBackward(kHandle, relu.get(), &one, xd.get(), y.data(), xd.get(), dy.data(), xd.get(),
                                        nullptr, &zero, xd.get(), dx.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "x")) << last_error();
  EXPECT_EQ(ooc_cudnnAddTensor(kHandle, &one, xd.get(), nullptr, &one, xd.get(), y.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "A")) << last_error();
  EXPECT_EQ(ooc_cudnnAddTensor(kHandle, &one, xd.get(), x.data(), nullptr, xd.get(), y.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "beta")) << last_error();
  EXPECT_EQ(ooc_cudnnPoolingBackward(kHandle, max2.get(), &one, pooled_d.get(), y.data(), pooled_d.get(), nullptr,
                                     xd.get(), x.data(), &zero, xd.get(), dx.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dy")) << last_error();
  EXPECT_EQ(ooc_cudnnSoftmaxBackward(kHandle, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &one, xd.get(), y.data(),
                                     xd.get(), dy.data(), &zero, xd.get(), nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dx")) << last_error();
}

TEST_F(CapiLayerArgs, DescriptorsAreCheckedAndNamed) {
  const Tensor unset = unset_tensor();
  EXPECT_EQ(act_fwd(relu.get(), nullptr, xd.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "xDesc")) << last_error();
  EXPECT_EQ(act_fwd(relu.get(), xd.get(), unset.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(act_fwd(nullptr, xd.get(), xd.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "activationDesc")) << last_error();
  const Tensor other = tensor({2, 3, 5, 6});
  EXPECT_EQ(act_fwd(relu.get(), xd.get(), other.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(ooc_cudnnActivationBackward(kHandle, relu.get(), &one, xd.get(), y.data(), other.get(), dy.data(),
                                        xd.get(), x.data(), &zero, xd.get(), dx.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dyDesc")) << last_error();
  EXPECT_EQ(softmax_fwd(CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, other.get()), CUDNN_STATUS_BAD_PARAM);

  // Add: each dim of A is C's or 1, and the ranks agree.
  const Tensor bias_ok = tensor({1, 3, 1, 1}), bias_bad = tensor({1, 2, 1, 1}), bias_5d = tensor({1, 3, 1, 1, 1});
  std::vector<float> b(3, 1.0f);
  EXPECT_EQ(ooc_cudnnAddTensor(kHandle, &one, bias_ok.get(), b.data(), &one, xd.get(), y.data()), CUDNN_STATUS_SUCCESS)
      << last_error();
  EXPECT_EQ(ooc_cudnnAddTensor(kHandle, &one, bias_bad.get(), b.data(), &one, xd.get(), y.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "aDesc")) << last_error();
  EXPECT_EQ(ooc_cudnnAddTensor(kHandle, &one, bias_5d.get(), b.data(), &one, xd.get(), y.data()),
            CUDNN_STATUS_BAD_PARAM);

  // Pooling: the descriptor set, with the tensors' spatial rank, and y of the pooled shape.
  EXPECT_EQ(pool_fwd(max2.get(), xd.get(), pooled_d.get()), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(pool_fwd(nullptr, xd.get(), pooled_d.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "poolingDesc")) << last_error();
  const Pooling unset_pool = unset_pooling();
  EXPECT_EQ(pool_fwd(unset_pool.get(), xd.get(), pooled_d.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  const Pooling pool3 = pooling(CUDNN_POOLING_MAX, {2, 2, 2}, {0, 0, 0}, {2, 2, 2});
  EXPECT_EQ(pool_fwd(pool3.get(), xd.get(), pooled_d.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "poolingDesc")) << last_error();
  EXPECT_EQ(pool_fwd(max2.get(), xd.get(), xd.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  const Pooling too_wide = pooling(CUDNN_POOLING_MAX, {8, 2}, {0, 0}, {1, 1});  // window beyond H = 6
  EXPECT_EQ(pool_fwd(too_wide.get(), xd.get(), pooled_d.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  EXPECT_EQ(ooc_cudnnPoolingBackward(kHandle, max2.get(), &one, pooled_d.get(), y.data(), xd.get(), dy.data(), xd.get(),
                                     x.data(), &zero, xd.get(), dx.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dyDesc")) << last_error();
}

TEST_F(CapiLayerArgs, BadModesAreBadParam) {
  const Activation identity = activation(CUDNN_ACTIVATION_IDENTITY);
  EXPECT_EQ(act_fwd(identity.get(), xd.get(), xd.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(last_error().find("IDENTITY"), std::string::npos) << last_error();
  EXPECT_EQ(softmax_fwd(static_cast<cudnnSoftmaxAlgorithm_t>(9), CUDNN_SOFTMAX_MODE_CHANNEL, xd.get()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "algo")) << last_error();
  EXPECT_EQ(softmax_fwd(CUDNN_SOFTMAX_ACCURATE, static_cast<cudnnSoftmaxMode_t>(9), xd.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "mode")) << last_error();
}

TEST_F(CapiLayerArgs, UnsupportedTypesLayoutsAndPaddingAreNotSupported) {
  const Tensor x_double = tensor(shape, CUDNN_DATA_DOUBLE);
  EXPECT_EQ(act_fwd(relu.get(), x_double.get(), x_double.get()), CUDNN_STATUS_NOT_SUPPORTED);
  Tensor nhwc = unset_tensor();
  ASSERT_EQ(cudnnSetTensor4dDescriptor(nhwc.get(), CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 2, 3, 6, 5),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(act_fwd(relu.get(), nhwc.get(), nhwc.get()), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "xDesc")) << last_error();
  EXPECT_EQ(softmax_fwd(CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, nhwc.get()), CUDNN_STATUS_NOT_SUPPORTED);
  const Tensor padded_rows = tensor(shape, CUDNN_DATA_FLOAT, {3 * 6 * 8, 6 * 8, 8, 1});
  EXPECT_EQ(pool_fwd(max2.get(), padded_rows.get(), pooled_d.get()), CUDNN_STATUS_NOT_SUPPORTED);
  // cuDNN pools 2-D and 3-D windows; a 6-D tensor is beyond them.
  const Tensor x6 = tensor({1, 1, 2, 2, 2, 2});
  EXPECT_EQ(pool_fwd(max2.get(), x6.get(), x6.get()), CUDNN_STATUS_NOT_SUPPORTED);
  const Pooling wide_pad = pooling(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, {2, 2}, {2, 0}, {1, 1});
  EXPECT_EQ(pool_fwd(wide_pad.get(), xd.get(), pooled_d.get()), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "poolingDesc")) << last_error();
}

TEST_F(CapiLayerArgs, ImpossibleBudgetIsAllocFailed) {
  oocSetMemoryLimit(1);
  EXPECT_EQ(act_fwd(relu.get(), xd.get(), xd.get()), CUDNN_STATUS_ALLOC_FAILED);
  EXPECT_NE(last_error().find("memory_limit"), std::string::npos) << last_error();
  EXPECT_EQ(pool_fwd(max2.get(), xd.get(), pooled_d.get()), CUDNN_STATUS_ALLOC_FAILED);
}

// --- numerics through the host backend ---

using CapiLayerHost = HostBackendTest;

TEST_F(CapiLayerHost, AddTensorBroadcastsAndBlends) {
  std::mt19937 rng(test_seed(21));
  const Shape c_shape{3, 4, 6, 5};
  for (const Shape& a_shape : {Shape{1, 4, 1, 1}, Shape{3, 1, 6, 1}, Shape{1, 1, 1, 5}, c_shape}) {
    for (const Scaling& s : kScalings) {
      SCOPED_TRACE("A " + shape_str(a_shape) + ", " + scaling_name(s));
      const Tensor ad = tensor(a_shape), cd = tensor(c_shape);
      const auto a = random_vector(count_of(a_shape), rng);
      oocSetMemoryLimit(split_budget(
          [&](const ooc::Options& o) { return ooc::plan_add_tensor(a_shape, c_shape, true, o); }));
      expect_blend(
          [&](float* c) { return ooc_cudnnAddTensor(kHandle, &s.alpha, ad.get(), a.data(), &s.beta, cd.get(), c); },
          broadcast(a_shape, a, c_shape), s, rng, "add tensor C");
    }
  }
}

struct ActivationCase {
  cudnnActivationMode_t mode;
  double coef;
};

const ActivationCase kActivations[] = {{CUDNN_ACTIVATION_RELU, 0.0},         {CUDNN_ACTIVATION_SIGMOID, 0.0},
                                       {CUDNN_ACTIVATION_TANH, 0.0},         {CUDNN_ACTIVATION_CLIPPED_RELU, 0.6},
                                       {CUDNN_ACTIVATION_ELU, 0.8},          {CUDNN_ACTIVATION_SWISH, 1.3}};

// Ranks 4 to 6: element-wise, so any rank cuDNN describes.
const Shape kElementwiseShapes[] = {{3, 4, 7, 5}, {2, 3, 4, 5, 3}, {2, 2, 3, 2, 3, 2}};

TEST_F(CapiLayerHost, ActivationForwardAndBackwardMatchReferences) {
  std::mt19937 rng(test_seed(22));
  for (const Shape& shape : kElementwiseShapes)
    for (const ActivationCase& ac : kActivations)
      for (const Scaling& s : kScalings) {
        SCOPED_TRACE(shape_str(shape) + ", mode " + std::to_string(ac.mode) + ", " + scaling_name(s));
        const Tensor d = tensor(shape);
        const Activation act = activation(ac.mode, ac.coef);
        const size_t n = count_of(shape);
        const auto x = random_vector(n, rng), dy = random_vector(n, rng);
        std::vector<double> fx(n), grad(n);
        std::vector<float> y_exact(n);
        for (size_t i = 0; i < n; ++i) {
          fx[i] = activation_ref(ac.mode, ac.coef, x[i]);
          y_exact[i] = static_cast<float>(fx[i]);
          grad[i] = activation_grad_ref(ac.mode, ac.coef, x[i], dy[i]);
        }
        oocSetMemoryLimit(
            split_budget([&](const ooc::Options& o) { return ooc::plan_activation_backward(flat(shape), o); }));
        expect_blend(
            [&](float* y) {
              return ooc_cudnnActivationForward(kHandle, act.get(), &s.alpha, d.get(), x.data(), &s.beta, d.get(), y);
            },
            fx, s, rng, "activation forward y");
        expect_blend(
            [&](float* dx) {
              return ooc_cudnnActivationBackward(kHandle, act.get(), &s.alpha, d.get(), y_exact.data(), d.get(),
                                                 dy.data(), d.get(), x.data(), &s.beta, d.get(), dx);
            },
            grad, s, rng, "activation backward dx");
      }
}

TEST_F(CapiLayerHost, ActivationInPlace) {
  std::mt19937 rng(test_seed(23));
  const Shape shape{4, 3, 5, 6};
  const Tensor d = tensor(shape);
  const Activation act = activation(CUDNN_ACTIVATION_TANH);
  const auto x = random_vector(count_of(shape), rng);
  std::vector<double> fx(x.size());
  for (size_t i = 0; i < x.size(); ++i) fx[i] = std::tanh(x[i]);
  oocSetMemoryLimit(split_budget([&](const ooc::Options& o) { return ooc::plan_activation_forward(flat(shape), o); }));
  const float alpha = 2.0f, beta = 0.25f;
  std::vector<float> xy = x;  // x == y: beta blends the input itself
  ASSERT_EQ(ooc_cudnnActivationForward(kHandle, act.get(), &alpha, d.get(), xy.data(), &beta, d.get(), xy.data()),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  expect_close(xy, blended(fx, alpha, beta, x), "y in place");
  expect_split_run("activation in place");
}

TEST_F(CapiLayerHost, SoftmaxForwardAndBackwardMatchReferences) {
  std::mt19937 rng(test_seed(24));
  for (const Shape& shape : {Shape{3, 5, 4, 6}, Shape{4, 3, 2, 3, 4}})
    for (const cudnnSoftmaxMode_t mode : {CUDNN_SOFTMAX_MODE_CHANNEL, CUDNN_SOFTMAX_MODE_INSTANCE})
      for (const cudnnSoftmaxAlgorithm_t algo : {CUDNN_SOFTMAX_FAST, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_LOG})
        for (const Scaling& s : kScalings) {
          SCOPED_TRACE(shape_str(shape) + ", mode " + std::to_string(mode) + ", algo " + std::to_string(algo) + ", " +
                       scaling_name(s));
          const bool log = algo == CUDNN_SOFTMAX_LOG;
          const Tensor d = tensor(shape);
          const size_t n = count_of(shape);
          const auto x = random_vector(n, rng, 0.5), dy = random_vector(n, rng);
          const std::vector<double> sm = softmax_ref(shape, mode, log, x);
          const std::vector<float> y_exact(sm.begin(), sm.end());
          const ooc::SoftmaxMode over = mode == CUDNN_SOFTMAX_MODE_CHANNEL ? ooc::SoftmaxMode::channel
                                                                           : ooc::SoftmaxMode::instance;
          oocSetMemoryLimit(
              split_budget([&](const ooc::Options& o) { return ooc::plan_softmax_backward(flat(shape), over, o); }));

          expect_blend(
              [&](float* y) {
                return ooc_cudnnSoftmaxForward(kHandle, algo, mode, &s.alpha, d.get(), x.data(), &s.beta, d.get(), y);
              },
              sm, s, rng, "softmax forward y");
          expect_blend(
              [&](float* dx) {
                return ooc_cudnnSoftmaxBackward(kHandle, algo, mode, &s.alpha, d.get(), y_exact.data(), d.get(),
                                                dy.data(), &s.beta, d.get(), dx);
              },
              softmax_grad_ref(shape, mode, log, y_exact, dy), s, rng, "softmax backward dx");
        }
}

struct PoolCase {
  const char* name;
  cudnnPoolingMode_t mode;
  PoolGeometry g;
};

const PoolCase kPools[] = {
    {"max2d_pad_stride", CUDNN_POOLING_MAX, {{2, 3, 11, 9}, {3, 3}, {1, 1}, {2, 2}}},
    {"max2d_deterministic", CUDNN_POOLING_MAX_DETERMINISTIC, {{2, 3, 8, 10}, {2, 3}, {0, 1}, {2, 3}}},
    {"avg2d_include_pad", CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, {{3, 2, 9, 7}, {2, 3}, {1, 1}, {2, 1}}},
    {"avg2d_exclude_pad", CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, {{2, 4, 7, 8}, {3, 3}, {1, 1}, {1, 2}}},
    {"max3d", CUDNN_POOLING_MAX, {{2, 2, 6, 7, 8}, {2, 2, 2}, {0, 0, 0}, {2, 2, 2}}},
    {"avg3d_exclude_pad", CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, {{1, 3, 5, 6, 7}, {3, 3, 3}, {1, 1, 1}, {1, 2, 1}}},
};

void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

class CapiPoolHost : public HostBackendTest, public ::testing::WithParamInterface<PoolCase> {};

TEST_P(CapiPoolHost, ForwardAndBackwardMatchReferences) {
  const PoolCase& pc = GetParam();
  const PoolGeometry& g = pc.g;
  std::mt19937 rng(test_seed(25));
  const Shape y_shape = pooled(g);
  const Tensor xd = tensor(g.x), yd = tensor(y_shape);
  const Pooling pool = pooling(pc.mode, g.window, g.padding, g.stride);
  const auto x = random_vector(count_of(g.x), rng), dy = random_vector(count_of(y_shape), rng);
  const cudnnPoolingMode_t ref_mode = pc.mode == CUDNN_POOLING_MAX_DETERMINISTIC ? CUDNN_POOLING_MAX : pc.mode;
  const std::vector<double> pooled_x = pool_ref(g, ref_mode, x);
  const std::vector<float> y_exact(pooled_x.begin(), pooled_x.end());
  const ooc::ConvProblem p = ooc::pool_problem(g.x, g.window, g.stride, g.padding);
  for (const bool direct : {false, true}) {
    for (const Scaling& s : kScalings) {
      SCOPED_TRACE(scaling_name(s) + (direct ? ", direct DMA" : ", staged"));
      const HostDirectAccess access(direct);
      oocSetMemoryLimit(split_budget([&](const ooc::Options& o) { return ooc::plan_pool_forward(p, o); }));
      expect_blend(
          [&](float* y) {
            return ooc_cudnnPoolingForward(kHandle, pool.get(), &s.alpha, xd.get(), x.data(), &s.beta, yd.get(), y);
          },
          pooled_x, s, rng, "pooling forward y");
      oocSetMemoryLimit(split_budget(
          [&](const ooc::Options& o) { return ooc::plan_pool_backward(ooc::pool_backward_problem(p), o); }));
      expect_blend(
          [&](float* dx) {
            return ooc_cudnnPoolingBackward(kHandle, pool.get(), &s.alpha, yd.get(), y_exact.data(), yd.get(), dy.data(),
                                            xd.get(), x.data(), &s.beta, xd.get(), dx);
          },
          pool_grad_ref(g, ref_mode, x, dy), s, rng, "pooling backward dx");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CapiPoolHost, ::testing::ValuesIn(kPools),
                         [](const ::testing::TestParamInfo<PoolCase>& info) { return std::string(info.param.name); });

}  // namespace
