// The fused entry points of the C API (ooc_cudnnConvolutionBiasActivationPoolingForward,
// DeconvolutionBiasActivationForward, ConvolutionBackwardDataFilterBias and its activation and
// pooling forms) without a GPU: argument checks and status codes, and their results on the host
// backend, split by tiny budgets into NaN-poisoned outputs, against the composition of unfused
// ooc_cudnn* calls ooc_cudnn.h documents each as replacing (those are checked against float64
// references in test_capi.cpp and test_capi_layers.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "capi_fixtures.hpp"
#include "capi_fused_compositions.hpp"
#include "conv_run.hpp"
#include "ooc/fused.hpp"

namespace {

using namespace ooc_test;

const cudnnHandle_t kHandle = dummy_handle();

size_t count_of(const Shape& s) { return static_cast<size_t>(product(s)); }
std::vector<float> poisoned(const Shape& s) { return std::vector<float>(count_of(s), std::nanf("")); }
std::vector<double> widened(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// A convolution with bias, activation and pooling after it, described as a cuDNN program would.
struct FusedCase {
  ConvDescriptors c;
  Pooling pool;
  Shape pooled_shape;
  Tensor pooled;

  FusedCase(const Shape& x, const Shape& w, cudnnPoolingMode_t mode, const Shape& window, const Shape& padding,
            const Shape& stride)
      : c(x, w, Shape(x.size() - 2, 1), Shape(x.size() - 2, 1), Shape(x.size() - 2, 1)),
        pool(pooling(mode, window, padding, stride)),
        pooled_shape(ooc::pool_problem(c.problem.y_shape(), window, stride, padding).y_shape()),
        pooled(tensor(pooled_shape)) {}
};

struct ActivationCase {
  const char* name;
  cudnnActivationMode_t mode;
  double coef;
  bool needs_pre;  // y alone does not give the gradient
};
const ActivationCase kActivations[] = {{"identity", CUDNN_ACTIVATION_IDENTITY, 0, false},
                                       {"relu", CUDNN_ACTIVATION_RELU, 0, false},
                                       {"tanh", CUDNN_ACTIVATION_TANH, 0, false},
                                       {"elu", CUDNN_ACTIVATION_ELU, 1.3, true},
                                       {"swish", CUDNN_ACTIVATION_SWISH, 0.8, true}};

// The unfused calls take no IDENTITY descriptor: the composition skips the step instead.
cudnnActivationDescriptor_t unfused(const ActivationCase& a, const Activation& d) {
  return a.mode == CUDNN_ACTIVATION_IDENTITY ? nullptr : d.get();
}

// --- argument checks ---

class CapiFusedArgs : public HostBackendTest {
 protected:
  FusedCase f{{2, 3, 6, 6}, {4, 3, 3, 3}, CUDNN_POOLING_MAX, {2, 2}, {0, 0}, {2, 2}};
  const ooc::ConvProblem& p = f.c.problem;
  Activation relu = activation(CUDNN_ACTIVATION_RELU), elu = activation(CUDNN_ACTIVATION_ELU, 1.0);
  std::vector<float> x = std::vector<float>(p.x_elements(), 0.5f), w = std::vector<float>(p.w_elements(), 0.5f),
                     y = std::vector<float>(p.y_elements(), 0.5f), bias = std::vector<float>(p.k, 0.5f),
                     q = std::vector<float>(count_of(f.pooled_shape), 0.5f), dx = x, dw = w, db = bias, dy = y, pre = y,
                     dq = q;
  float one = 1.0f, zero = 0.0f;

  cudnnStatus_t pool_fwd(const void* z, cudnnTensorDescriptor_t yDesc, float* out, const void* alpha2) {
    return ooc_cudnnConvolutionBiasActivationPoolingForward(kHandle, &one, f.c.x.get(), x.data(), f.c.w.get(),
                                                            w.data(), f.c.conv.get(), alpha2, f.c.y.get(), z,
                                                            f.c.bias.get(), bias.data(), relu.get(), f.pool.get(),
                                                            yDesc, out);
  }
  cudnnStatus_t bwd(cudnnTensorDescriptor_t dbDesc, float* dxp) {
    return ooc_cudnnConvolutionBackwardDataFilterBias(kHandle, f.c.x.get(), x.data(), f.c.y.get(), dy.data(),
                                                      f.c.w.get(), w.data(), f.c.conv.get(), f.c.x.get(), dxp,
                                                      f.c.w.get(), dw.data(), dbDesc, db.data());
  }
  cudnnStatus_t act_bwd(cudnnActivationDescriptor_t a, const void* prep) {
    return ooc_cudnnActivationConvolutionBackwardDataFilterBias(
        kHandle, a, f.c.x.get(), x.data(), f.c.w.get(), w.data(), f.c.conv.get(), f.c.y.get(), y.data(), f.c.y.get(),
        prep, f.c.y.get(), dy.data(), f.c.x.get(), dx.data(), f.c.w.get(), dw.data(), f.c.bias.get(), db.data());
  }
  cudnnStatus_t pool_bwd(cudnnTensorDescriptor_t qDesc, const void* yp) {
    return ooc_cudnnPoolingActivationConvolutionBackwardDataFilterBias(
        kHandle, f.pool.get(), relu.get(), f.c.x.get(), x.data(), f.c.w.get(), w.data(), f.c.conv.get(), f.c.y.get(),
        yp, f.c.y.get(), nullptr, qDesc, q.data(), f.pooled.get(), dq.data(), f.c.x.get(), dx.data(), f.c.w.get(),
        dw.data(), f.c.bias.get(), db.data());
  }
};

TEST_F(CapiFusedArgs, NullHandleIsBadParamForEveryFusedEntryPoint) {
  const cudnnStatus_t bad = CUDNN_STATUS_BAD_PARAM;
  EXPECT_EQ(ooc_cudnnConvolutionBiasActivationPoolingForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                             nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                             nullptr, nullptr, nullptr, nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnDeconvolutionBiasActivationForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnConvolutionBackwardDataFilterBias(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                       nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnActivationConvolutionBackwardDataFilterBias(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                                 nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                                 nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                                 nullptr),
            bad);
  EXPECT_EQ(ooc_cudnnPoolingActivationConvolutionBackwardDataFilterBias(
                nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            bad);
  // Also with everything else valid: the handle is checked, not assumed.
  EXPECT_EQ(ooc_cudnnConvolutionBackwardDataFilterBias(nullptr, f.c.x.get(), x.data(), f.c.y.get(), dy.data(),
                                                       f.c.w.get(), w.data(), f.c.conv.get(), f.c.x.get(), dx.data(),
                                                       f.c.w.get(), dw.data(), f.c.bias.get(), db.data()),
            bad);
  EXPECT_TRUE(names_argument(last_error(), "handle")) << last_error();
}

TEST_F(CapiFusedArgs, PooledForwardChecksZPoolingAndTheOutputShape) {
  std::vector<float> out = q;
  EXPECT_EQ(pool_fwd(nullptr, f.pooled.get(), out.data(), &zero), CUDNN_STATUS_SUCCESS) << last_error();
  // z is read when alpha2 != 0, so it must be there.
  EXPECT_EQ(pool_fwd(nullptr, f.pooled.get(), out.data(), &one), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "z")) << last_error();
  EXPECT_EQ(pool_fwd(y.data(), f.pooled.get(), out.data(), &one), CUDNN_STATUS_SUCCESS) << last_error();
  // y is the pooled output, not the convolution's.
  EXPECT_EQ(pool_fwd(nullptr, f.c.y.get(), y.data(), &zero), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(ooc_cudnnConvolutionBiasActivationPoolingForward(kHandle, &one, f.c.x.get(), x.data(), f.c.w.get(),
                                                             w.data(), f.c.conv.get(), &zero, f.c.y.get(), nullptr,
                                                             f.c.bias.get(), bias.data(), relu.get(), nullptr,
                                                             f.pooled.get(), out.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "poolingDesc")) << last_error();
  const Tensor wrong_bias = tensor({1, 3, 1, 1});
  EXPECT_EQ(ooc_cudnnConvolutionBiasActivationPoolingForward(kHandle, &one, f.c.x.get(), x.data(), f.c.w.get(),
                                                             w.data(), f.c.conv.get(), &zero, f.c.y.get(), nullptr,
                                                             wrong_bias.get(), bias.data(), relu.get(), f.pool.get(),
                                                             f.pooled.get(), out.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "biasDesc")) << last_error();
  EXPECT_EQ(ooc_cudnnConvolutionBiasActivationPoolingForward(kHandle, &one, f.c.x.get(), x.data(), f.c.w.get(),
                                                             w.data(), f.c.conv.get(), &zero, f.c.y.get(), nullptr,
                                                             f.c.bias.get(), nullptr, relu.get(), f.pool.get(),
                                                             f.pooled.get(), out.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "bias")) << last_error();
}

TEST_F(CapiFusedArgs, DeconvolutionOutputShapeMustFitTheGeometry) {
  // x [2, 4, 3, 3], w [4, 2, 3, 3], stride 2, padding 1: out = 5 + output_padding, output_padding < 2.
  const Tensor xd = tensor({2, 4, 3, 3}), bd = tensor({1, 2, 1, 1});
  const Filter wd = filter({4, 2, 3, 3});
  const Convolution cd = convolution({1, 1}, {2, 2}, {1, 1});
  std::vector<float> xs(2 * 4 * 9, 0.5f), ws(4 * 2 * 9, 0.5f), bs(2, 0.5f), out(2 * 2 * 6 * 6);
  const auto run = [&](const Shape& y_shape) {
    const Tensor yd = tensor(y_shape);
    return ooc_cudnnDeconvolutionBiasActivationForward(kHandle, &one, xd.get(), xs.data(), wd.get(), ws.data(),
                                                       cd.get(), &zero, yd.get(), nullptr, bd.get(), bs.data(),
                                                       relu.get(), yd.get(), out.data());
  };
  EXPECT_EQ(run({2, 2, 5, 5}), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(run({2, 2, 6, 5}), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(run({2, 2, 7, 5}), CUDNN_STATUS_BAD_PARAM);  // output_padding 2 = stride
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(run({2, 2, 4, 5}), CUDNN_STATUS_BAD_PARAM);  // output_padding -1
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(run({2, 3, 5, 5}), CUDNN_STATUS_BAD_PARAM);  // channels are w's second dimension
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(run({3, 2, 5, 5}), CUDNN_STATUS_BAD_PARAM);
}

TEST_F(CapiFusedArgs, BackwardChecksGradientsActivationInputsAndPooledTensors) {
  EXPECT_EQ(bwd(f.c.bias.get(), dx.data()), CUDNN_STATUS_SUCCESS) << last_error();
  const Tensor wrong_db = tensor({1, 3, 1, 1});
  EXPECT_EQ(bwd(wrong_db.get(), dx.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dbDesc")) << last_error();
  EXPECT_EQ(bwd(f.c.bias.get(), nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dx")) << last_error();
  EXPECT_EQ(ooc_cudnnConvolutionBackwardDataFilterBias(kHandle, f.c.x.get(), x.data(), f.pooled.get(), dy.data(),
                                                       f.c.w.get(), w.data(), f.c.conv.get(), f.c.x.get(), dx.data(),
                                                       f.c.w.get(), dw.data(), f.c.bias.get(), db.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dyDesc")) << last_error();

  // relu's gradient comes from y; elu's needs pre.
  EXPECT_EQ(act_bwd(relu.get(), nullptr), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(act_bwd(elu.get(), pre.data()), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(act_bwd(elu.get(), nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "pre")) << last_error();
  EXPECT_EQ(act_bwd(nullptr, nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "activationDesc")) << last_error();

  EXPECT_EQ(pool_bwd(f.pooled.get(), y.data()), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(pool_bwd(f.c.y.get(), y.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "qDesc")) << last_error();
  EXPECT_EQ(pool_bwd(f.pooled.get(), nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "y")) << last_error();
}

TEST_F(CapiFusedArgs, ImpossibleBudgetIsAllocFailed) {
  oocSetMemoryLimit(1);
  EXPECT_EQ(bwd(f.c.bias.get(), dx.data()), CUDNN_STATUS_ALLOC_FAILED);
  EXPECT_NE(last_error().find("memory_limit"), std::string::npos) << last_error();
}

// --- numerics through the host backend, against the unfused ooc_cudnn* composition ---

class CapiFusedHost : public HostBackendTest {
 protected:
  std::mt19937 rng{test_seed(71)};
  cudnnHandle_t h = kHandle;

  // Runs the composition with no budget (its own calls split or not as they like; they are
  // checked elsewhere), then `fused` under `budget` into NaN-poisoned outputs.
  template <typename Compose>
  void reference(Compose compose) {
    oocSetMemoryLimit(0);
    ASSERT_EQ(compose(), CUDNN_STATUS_SUCCESS) << last_error();
  }
};

TEST_F(CapiFusedHost, PooledForwardMatchesConvBiasActivationThenPooling) {
  for (const cudnnPoolingMode_t mode : {CUDNN_POOLING_MAX, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING})
    for (const ActivationCase& a : kActivations)
      for (const float alpha2 : {0.0f, -0.5f}) {
        SCOPED_TRACE(std::string(a.name) + ", pooling mode " + std::to_string(mode) + ", alpha2 " +
                     std::to_string(alpha2));
        FusedCase f({2, 3, 11, 9}, {4, 3, 3, 3}, mode, {3, 2}, {1, 0}, {2, 2});
        const ooc::ConvProblem& p = f.c.problem;
        const Activation act = activation(a.mode, a.coef);
        const float alpha1 = 0.75f;
        const auto x = random_vector(p.x_elements(), rng), w = random_vector(p.w_elements(), rng),
                   z = random_vector(p.y_elements(), rng), bias = random_vector(p.k, rng);
        std::vector<float> t(p.y_elements()), want(count_of(f.pooled_shape));
        reference([&] {
          return compose_conv_bias_activation_pooling(kOocCalls, h, alpha1, f.c.x.get(), x.data(), f.c.w.get(),
                                                      w.data(), f.c.conv.get(), alpha2, f.c.y.get(), z.data(),
                                                      f.c.bias.get(), bias.data(), unfused(a, act), f.pool.get(),
                                                      t.data(), f.pooled.get(), want.data());
        });
        ooc::ConvProblem conv = p;
        conv.alpha = alpha1;
        conv.beta = alpha2;
        conv.has_bias = true;
        const ooc::ConvProblem pool = ooc::pool_problem(p.y_shape(), {3, 2}, {2, 2}, {1, 0});
        oocSetMemoryLimit(split_budget([&](const ooc::Options& o) {
          return ooc::plan_conv_bias_activation_pooling_forward(conv, pool, o);
        }));
        std::vector<float> y = poisoned(f.pooled_shape);
        ASSERT_EQ(ooc_cudnnConvolutionBiasActivationPoolingForward(
                      h, &alpha1, f.c.x.get(), x.data(), f.c.w.get(), w.data(), f.c.conv.get(), &alpha2, f.c.y.get(),
                      alpha2 != 0.0f ? z.data() : nullptr, f.c.bias.get(), bias.data(), act.get(), f.pool.get(),
                      f.pooled.get(), y.data()),
                  CUDNN_STATUS_SUCCESS)
            << last_error();
        expect_close(y, widened(want), "pooled y");
        expect_split_run("pooled forward");
      }
}

TEST_F(CapiFusedHost, DeconvolutionMatchesBackwardDataBiasActivation) {
  // x [2, 4, 5, 4] -> y [2, 3, 10, 8]: stride 2, padding 1, output_padding 1 (implied by yDesc).
  const Shape xs{2, 4, 5, 4}, ws{4, 3, 3, 3}, ys{2, 3, 10, 8};
  const Tensor xd = tensor(xs), yd = tensor(ys), bd = tensor({1, 3, 1, 1});
  const Filter wd = filter(ws);
  const Convolution cd = convolution({1, 1}, {2, 2}, {1, 1});
  for (const ActivationCase& a : kActivations)
    for (const float alpha2 : {0.0f, 0.5f}) {
      SCOPED_TRACE(std::string(a.name) + ", alpha2 " + std::to_string(alpha2));
      const Activation act = activation(a.mode, a.coef);
      const float alpha1 = -1.25f;
      const auto x = random_vector(count_of(xs), rng), w = random_vector(count_of(ws), rng),
                 z = random_vector(count_of(ys), rng), bias = random_vector(3, rng);
      std::vector<float> want(count_of(ys));
      reference([&] {
        return compose_deconv_bias_activation(kOocCalls, h, alpha1, xd.get(), x.data(), wd.get(), w.data(), cd.get(),
                                              alpha2, z.data(), bd.get(), bias.data(), unfused(a, act), yd.get(),
                                              want.data());
      });
      const ooc::ConvProblem deconv =
          ooc::deconv_problem(xs, ws, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, alpha1, alpha2, true);
      oocSetMemoryLimit(
          split_budget([&](const ooc::Options& o) { return ooc::plan_deconv_bias_activation_forward(deconv, o); }));
      std::vector<float> y = poisoned(ys);
      ASSERT_EQ(ooc_cudnnDeconvolutionBiasActivationForward(h, &alpha1, xd.get(), x.data(), wd.get(), w.data(),
                                                            cd.get(), &alpha2, yd.get(),
                                                            alpha2 != 0.0f ? z.data() : nullptr, bd.get(),
                                                            bias.data(), act.get(), yd.get(), y.data()),
                CUDNN_STATUS_SUCCESS)
          << last_error();
      expect_close(y, widened(want), "deconvolution y");
      expect_split_run("deconvolution");
    }
}

// The three gradients of one fused backward call against the composition's.
struct Grads {
  std::vector<float> dx, dw, db;
  explicit Grads(const ooc::ConvProblem& p, float fill)
      : dx(p.x_elements(), fill), dw(p.w_elements(), fill), db(p.k, fill) {}
};

void expect_grads(const Grads& got, const Grads& want) {
  expect_close(got.dx, widened(want.dx), "dx");
  expect_close(got.dw, widened(want.dw), "dw");
  expect_close(got.db, widened(want.db), "db");
}

TEST_F(CapiFusedHost, BackwardDataFilterBiasMatchesTheThreeCalls) {
  // Strided and dilated, 2-D and 3-D.
  struct Geometry {
    Shape x, w, padding, stride, dilation;
  };
  for (const Geometry& g : {Geometry{{3, 3, 10, 9}, {5, 3, 3, 2}, {1, 0}, {2, 1}, {1, 2}},
                            Geometry{{2, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, {0, 1, 1}, {1, 2, 1}, {1, 1, 1}}}) {
    SCOPED_TRACE("x " + shape_str(g.x));
    const ConvDescriptors c(g.x, g.w, g.padding, g.stride, g.dilation);
    const ooc::ConvProblem& fwd = c.problem;
    const auto x = random_vector(fwd.x_elements(), rng), w = random_vector(fwd.w_elements(), rng),
               dy = random_vector(fwd.y_elements(), rng);
    Grads want(fwd, 0.0f);
    reference([&] {
      return compose_backward_data_filter_bias(kOocCalls, h, c.x.get(), x.data(), c.y.get(), dy.data(), c.w.get(),
                                               w.data(), c.conv.get(), want.dx.data(), want.dw.data(), c.bias.get(),
                                               want.db.data());
    });
    const ooc::ConvProblem p = ooc::ConvProblem::backward_data(fwd.y_shape(), g.w, g.x, g.stride, g.padding,
                                                               g.dilation, 1, 1.0, 0.0);
    oocSetMemoryLimit(
        split_budget([&](const ooc::Options& o) { return ooc::plan_conv_backward_data_filter_bias(p, o); }));
    Grads got(fwd, std::nanf(""));
    ASSERT_EQ(ooc_cudnnConvolutionBackwardDataFilterBias(h, c.x.get(), x.data(), c.y.get(), dy.data(), c.w.get(),
                                                         w.data(), c.conv.get(), c.x.get(), got.dx.data(), c.w.get(),
                                                         got.dw.data(), c.bias.get(), got.db.data()),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    expect_grads(got, want);
    expect_split_run("backward data, filter, bias");
  }
}

TEST_F(CapiFusedHost, ActivationBackwardFoldsIntoTheGradients) {
  const ConvDescriptors c({2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1});
  const ooc::ConvProblem& fwd = c.problem;
  for (const ActivationCase& a : kActivations)
    for (const bool give_pre : {true, false}) {
      if (a.needs_pre && !give_pre) continue;  // BAD_PARAM, checked above
      SCOPED_TRACE(std::string(a.name) + (give_pre ? ", with pre" : ", from y alone"));
      const Activation act = activation(a.mode, a.coef);
      const auto x = random_vector(fwd.x_elements(), rng), w = random_vector(fwd.w_elements(), rng),
                 pre = random_vector(fwd.y_elements(), rng), dy = random_vector(fwd.y_elements(), rng);
      std::vector<float> y(pre.size()), dz(pre.size());
      Grads want(fwd, 0.0f);
      reference([&] {
        const float one = 1.0f, zero = 0.0f;
        if (unfused(a, act)) {
          const cudnnStatus_t s =
              ooc_cudnnActivationForward(h, act.get(), &one, c.y.get(), pre.data(), &zero, c.y.get(), y.data());
          if (s != CUDNN_STATUS_SUCCESS) return s;
        }
        return compose_activation_backward_data_filter_bias(kOocCalls, h, unfused(a, act), c.x.get(), x.data(),
                                                            c.w.get(), w.data(), c.conv.get(), c.y.get(), y.data(),
                                                            pre.data(), dy.data(), dz.data(), want.dx.data(),
                                                            want.dw.data(), c.bias.get(), want.db.data());
      });
      const ooc::ConvProblem p = ooc::ConvProblem::backward_data(fwd.y_shape(), fwd.w_shape(), fwd.x_shape(),
                                                                 {1, 1}, {1, 1}, {1, 1}, 1, 1.0, 0.0);
      ooc::FusedActivation fa;
      fa.identity = a.mode == CUDNN_ACTIVATION_IDENTITY;
      oocSetMemoryLimit(split_budget([&](const ooc::Options& o) {
        return ooc::plan_activation_conv_backward_data_filter_bias(p, fa, give_pre, o);
      }));
      Grads got(fwd, std::nanf(""));
      ASSERT_EQ(ooc_cudnnActivationConvolutionBackwardDataFilterBias(
                    h, act.get(), c.x.get(), x.data(), c.w.get(), w.data(), c.conv.get(), c.y.get(), y.data(),
                    c.y.get(), give_pre ? pre.data() : nullptr, c.y.get(), dy.data(), c.x.get(), got.dx.data(),
                    c.w.get(), got.dw.data(), c.bias.get(), got.db.data()),
                CUDNN_STATUS_SUCCESS)
          << last_error();
      expect_grads(got, want);
      expect_split_run("activation backward data, filter, bias");
    }
}

TEST_F(CapiFusedHost, PoolingAndActivationBackwardFoldIntoTheGradients) {
  for (const cudnnPoolingMode_t mode : {CUDNN_POOLING_MAX, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING})
    for (const ActivationCase& a : kActivations) {
      SCOPED_TRACE(std::string(a.name) + ", pooling mode " + std::to_string(mode));
      FusedCase f({2, 3, 10, 9}, {4, 3, 3, 3}, mode, {2, 3}, {0, 1}, {2, 2});
      const ooc::ConvProblem& fwd = f.c.problem;
      const Activation act = activation(a.mode, a.coef);
      const auto x = random_vector(fwd.x_elements(), rng), w = random_vector(fwd.w_elements(), rng),
                 pre = random_vector(fwd.y_elements(), rng), dq = random_vector(count_of(f.pooled_shape), rng);
      std::vector<float> y = pre, q(count_of(f.pooled_shape)), dz(pre.size());
      Grads want(fwd, 0.0f);
      reference([&] {
        const float one = 1.0f, zero = 0.0f;
        if (unfused(a, act)) {
          const cudnnStatus_t s =
              ooc_cudnnActivationForward(h, act.get(), &one, f.c.y.get(), pre.data(), &zero, f.c.y.get(), y.data());
          if (s != CUDNN_STATUS_SUCCESS) return s;
        }
        const cudnnStatus_t s =
            ooc_cudnnPoolingForward(h, f.pool.get(), &one, f.c.y.get(), y.data(), &zero, f.pooled.get(), q.data());
        if (s != CUDNN_STATUS_SUCCESS) return s;
        return compose_pooling_activation_backward_data_filter_bias(
            kOocCalls, h, f.pool.get(), unfused(a, act), f.c.x.get(), x.data(), f.c.w.get(), w.data(), f.c.conv.get(),
            f.c.y.get(), y.data(), pre.data(), f.pooled.get(), q.data(), dq.data(), dz.data(), want.dx.data(),
            want.dw.data(), f.c.bias.get(), want.db.data());
      });
      const ooc::ConvProblem p = ooc::ConvProblem::backward_data(fwd.y_shape(), fwd.w_shape(), fwd.x_shape(),
                                                                 {1, 1}, {1, 1}, {1, 1}, 1, 1.0, 0.0);
      const ooc::ConvProblem pool = ooc::pool_problem(fwd.y_shape(), {2, 3}, {2, 2}, {0, 1});
      ooc::FusedActivation fa;
      fa.identity = a.mode == CUDNN_ACTIVATION_IDENTITY;
      oocSetMemoryLimit(split_budget([&](const ooc::Options& o) {
        return ooc::plan_pooling_activation_conv_backward_data_filter_bias(p, fa, pool, true, o);
      }));
      Grads got(fwd, std::nanf(""));
      ASSERT_EQ(ooc_cudnnPoolingActivationConvolutionBackwardDataFilterBias(
                    h, f.pool.get(), act.get(), f.c.x.get(), x.data(), f.c.w.get(), w.data(), f.c.conv.get(),
                    f.c.y.get(), y.data(), f.c.y.get(), pre.data(), f.pooled.get(), q.data(), f.pooled.get(),
                    dq.data(), f.c.x.get(), got.dx.data(), f.c.w.get(), got.dw.data(), f.c.bias.get(),
                    got.db.data()),
                CUDNN_STATUS_SUCCESS)
          << last_error();
      expect_grads(got, want);
      expect_split_run("pooling, activation backward data, filter, bias");
    }
}

}  // namespace
