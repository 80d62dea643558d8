// The batch-norm entry points of the C API without a GPU: argument checks and status codes, and
// training, inference and backward on the host backend against float64 references for the
// spatial and per-activation modes, 4-D and 5-D, with alpha/beta blends (and the parameter
// gradients' own), optional running and saved statistics, under budgets that split every pass.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "capi_fixtures.hpp"
#include "capi_layouts.hpp"
#include "capi_references.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"

namespace {

using namespace ooc_test;

const cudnnHandle_t kHandle = dummy_handle();

size_t count_of(const Shape& s) { return static_cast<size_t>(product(s)); }

// The per-channel descriptor of a mode and what the statistics run over: spatial: [1, C, 1...],
// per channel over N and space; per-activation: [1, C, space...], per position over N.
Shape params_shape(cudnnBatchNormMode_t mode, const Shape& x) {
  Shape p = x;
  p[0] = 1;
  if (mode != CUDNN_BATCHNORM_PER_ACTIVATION)
    for (size_t d = 2; d < p.size(); ++d) p[d] = 1;
  return p;
}
Shape normalized_shape(cudnnBatchNormMode_t mode, const Shape& x) {
  return mode == CUDNN_BATCHNORM_PER_ACTIVATION ? Shape{x[0], product(x) / x[0]} : x;
}

class CapiBatchNormArgs : public HostBackendTest {
 protected:
  const Shape shape{4, 3, 5, 6};
  Tensor xd = tensor(shape), pd = tensor({1, 3, 1, 1});
  std::vector<float> x = std::vector<float>(count_of(shape), 0.5f), y = x, dy = x, dx = x;
  std::vector<float> scale = std::vector<float>(3, 1.0f), bias = scale, mean = scale, var = scale, s1 = scale, s2 = scale;
  float one = 1.0f, zero = 0.0f;

  cudnnStatus_t training(cudnnBatchNormMode_t mode, cudnnTensorDescriptor_t params, void* running_mean,
                         void* running_var, double eps, void* save_mean, void* save_invvar) {
    return ooc_cudnnBatchNormalizationForwardTraining(kHandle, mode, &one, &zero, xd.get(), x.data(), xd.get(),
                                                      y.data(), params, scale.data(), bias.data(), 0.1, running_mean,
                                                      running_var, eps, save_mean, save_invvar);
  }
  cudnnStatus_t training() {
    return training(CUDNN_BATCHNORM_SPATIAL, pd.get(), mean.data(), var.data(), 1e-5, s1.data(), s2.data());
  }
};

TEST_F(CapiBatchNormArgs, ValidCallsSucceed) {
  EXPECT_EQ(training(), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, pd.get(), nullptr, nullptr, 1e-5, nullptr, nullptr), CUDNN_STATUS_SUCCESS)
      << last_error();
  EXPECT_EQ(ooc_cudnnBatchNormalizationBackward(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.get(),
                                                x.data(), xd.get(), dy.data(), xd.get(), dx.data(), pd.get(),
                                                scale.data(), s1.data(), s2.data(), 1e-5, nullptr, nullptr),
            CUDNN_STATUS_SUCCESS)
      << last_error();
}

TEST_F(CapiBatchNormArgs, NullPointersAndHalfPairsAreBadParam) {
  EXPECT_EQ(ooc_cudnnBatchNormalizationForwardTraining(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.get(),
                                                      x.data(), xd.get(), y.data(), pd.get(), nullptr, bias.data(),
                                                      0.1, nullptr, nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "bnScale")) << last_error();
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, pd.get(), mean.data(), nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "resultRunningVariance")) << last_error();
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, pd.get(), nullptr, nullptr, 1e-5, nullptr, s2.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "resultSaveMean")) << last_error();
  EXPECT_EQ(ooc_cudnnBatchNormalizationForwardInference(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.get(),
                                                       x.data(), xd.get(), y.data(), pd.get(), scale.data(),
                                                       bias.data(), mean.data(), nullptr, 1e-5),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "estimatedVariance")) << last_error();
  EXPECT_EQ(ooc_cudnnBatchNormalizationBackward(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, nullptr, xd.get(),
                                                x.data(), xd.get(), dy.data(), xd.get(), dx.data(), pd.get(),
                                                scale.data(), s1.data(), s2.data(), 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "betaParamDiff")) << last_error();
  EXPECT_EQ(ooc_cudnnBatchNormalizationBackward(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.get(),
                                                x.data(), xd.get(), dy.data(), xd.get(), dx.data(), pd.get(),
                                                scale.data(), s1.data(), s2.data(), 1e-5, mean.data(), nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "savedInvVariance")) << last_error();
}

TEST_F(CapiBatchNormArgs, DescriptorsModesAndEpsilonAreChecked) {
  const Tensor per_activation = tensor({1, 3, 5, 6}), wrong = tensor({1, 4, 1, 1});
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, wrong.get(), nullptr, nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "bnScaleBiasMeanVarDesc")) << last_error();
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, per_activation.get(), nullptr, nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(training(CUDNN_BATCHNORM_PER_ACTIVATION, pd.get(), nullptr, nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(training(static_cast<cudnnBatchNormMode_t>(7), pd.get(), nullptr, nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "mode")) << last_error();
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, pd.get(), nullptr, nullptr, -1e-3, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "epsilon")) << last_error();
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, pd.get(), nullptr, nullptr, std::nan(""), nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(training(CUDNN_BATCHNORM_SPATIAL, pd.get(), nullptr, nullptr, 0.0, nullptr, nullptr),
            CUDNN_STATUS_NOT_SUPPORTED);
  const Tensor other = tensor({4, 3, 6, 5});
  EXPECT_EQ(ooc_cudnnBatchNormalizationBackward(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.get(),
                                                x.data(), other.get(), dy.data(), xd.get(), dx.data(), pd.get(),
                                                scale.data(), s1.data(), s2.data(), 1e-5, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dyDesc")) << last_error();
  // Half x takes a half y and float per-channel tensors (cuDNN's rule); anything else is refused by name.
  const Tensor x_half = tensor(shape, CUDNN_DATA_HALF), x_double = tensor(shape, CUDNN_DATA_DOUBLE);
  const Tensor pd_half = tensor({1, 3, 1, 1}, CUDNN_DATA_HALF);
  auto inference = [&](const Tensor& xdesc, const Tensor& ydesc, const Tensor& pdesc) {
    return ooc_cudnnBatchNormalizationForwardInference(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xdesc.get(),
                                                       x.data(), ydesc.get(), y.data(), pdesc.get(), scale.data(),
                                                       bias.data(), mean.data(), var.data(), 1e-5);
  };
  EXPECT_EQ(inference(x_half, xd, pd), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(inference(x_half, x_half, pd_half), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "bnScaleBiasMeanVarDesc")) << last_error();
  EXPECT_EQ(inference(x_double, x_double, pd), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "xDesc")) << last_error();
}

TEST_F(CapiBatchNormArgs, NhwcTakesTheSpatialModesAndOneLayoutACall) {
  const Tensor nhwc = nhwc_tensor(shape);
  EXPECT_EQ(ooc_cudnnBatchNormalizationForwardTraining(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, nhwc.get(),
                                                       x.data(), nhwc.get(), y.data(), pd.get(), scale.data(),
                                                       bias.data(), 0.1, nullptr, nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  const Tensor per_activation = tensor({1, 3, 5, 6});
  EXPECT_EQ(ooc_cudnnBatchNormalizationForwardTraining(kHandle, CUDNN_BATCHNORM_PER_ACTIVATION, &one, &zero, nhwc.get(),
                                                       x.data(), nhwc.get(), y.data(), per_activation.get(),
                                                       scale.data(), bias.data(), 0.1, nullptr, nullptr, 1e-5, nullptr,
                                                       nullptr),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_NE(last_error().find("CUDNN_BATCHNORM_PER_ACTIVATION takes fully-packed NCHW tensors only"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(ooc_cudnnBatchNormalizationForwardTraining(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, nhwc.get(),
                                                       x.data(), xd.get(), y.data(), pd.get(), scale.data(), bias.data(),
                                                       0.1, nullptr, nullptr, 1e-5, nullptr, nullptr),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_NE(last_error().find("batch normalization mixes layouts (xDesc NHWC, yDesc NCHW)"), std::string::npos)
      << last_error();
}

TEST_F(CapiBatchNormArgs, ImpossibleBudgetIsAllocFailed) {
  oocSetMemoryLimit(1);
  EXPECT_EQ(training(), CUDNN_STATUS_ALLOC_FAILED);
  EXPECT_NE(last_error(), "");
}

// --- numerics ---

struct BnCase {
  const char* name;
  cudnnBatchNormMode_t mode;
  Shape x;
  bool nhwc = false;  // x, y, dy and dx packed NHWC: their memory is [N * space, C] rows
};

void PrintTo(const BnCase& c, std::ostream* os) { *os << c.name; }

class CapiBatchNormHost : public HostBackendTest, public ::testing::WithParamInterface<BnCase> {
 protected:
  void SetUp() override {
    HostBackendTest::SetUp();
    const BnCase& bc = GetParam();
    xd = bc.nhwc ? nhwc_tensor(bc.x) : tensor(bc.x);
    pd = tensor(params_shape(bc.mode, bc.x));
    norm = bc.nhwc ? Shape{product(bc.x) / bc.x[1], bc.x[1]} : normalized_shape(bc.mode, bc.x);
    channels = norm[1];
    x = random_vector(count_of(bc.x), rng, 2.0);
    dy = random_vector(count_of(bc.x), rng);
    scale = random_vector(channels, rng, 1.0);
    bias = random_vector(channels, rng);
  }
  // The library's plan of the call, for a budget that splits it.
  void split_for(ooc::Operation op) {
    oocSetMemoryLimit(split_budget(
        [&](const ooc::Options& o) { return ooc::plan_batchnorm(ooc::batchnorm_problem(op, norm), o); }));
  }

  std::mt19937 rng{test_seed(31)};
  Tensor xd, pd;
  Shape norm;
  int64_t channels = 0;
  std::vector<float> x, dy, scale, bias;
  const double eps = 1e-4;
};

TEST_P(CapiBatchNormHost, TrainingMatchesReference) {
  const BnCase& bc = GetParam();
  const Moments m = moments_ref(norm, x);
  const double count = static_cast<double>(count_of(bc.x) / static_cast<size_t>(channels)), factor = 0.3;
  std::vector<double> invstd(m.var.size());
  for (size_t c = 0; c < invstd.size(); ++c) invstd[c] = 1.0 / std::sqrt(m.var[c] + eps);
  const std::vector<double> normalized = normalize_ref(norm, x, m.mean, m.var, eps, scale, bias);
  split_for(ooc::Operation::batchnorm_forward_training);
  for (const float beta : {0.0f, 0.5f})
    for (const bool optional : {true, false}) {  // running and saved statistics given, or both left out
      SCOPED_TRACE(std::string("beta ") + std::to_string(beta) + (optional ? ", statistics" : ", no statistics"));
      const float alpha = 1.5f;
      const auto y_old = beta != 0.0f ? random_vector(x.size(), rng) : std::vector<float>(x.size(), std::nanf(""));
      const auto rm_old = random_vector(channels, rng), rv_old = random_vector(channels, rng, 2.0);
      std::vector<float> y = y_old, rm = rm_old, rv = rv_old, sm(channels, std::nanf("")), si(channels, std::nanf(""));
      ASSERT_EQ(ooc_cudnnBatchNormalizationForwardTraining(
                    kHandle, bc.mode, &alpha, &beta, xd.get(), x.data(), xd.get(), y.data(), pd.get(), scale.data(),
                    bias.data(), factor, optional ? rm.data() : nullptr, optional ? rv.data() : nullptr, eps,
                    optional ? sm.data() : nullptr, optional ? si.data() : nullptr),
                CUDNN_STATUS_SUCCESS)
          << last_error();
      expect_close(y, blended(normalized, alpha, beta, y_old), "y");
      expect_split_run("training");
      if (!optional) continue;
      std::vector<double> want_rm(channels), want_rv(channels);
      for (int64_t c = 0; c < channels; ++c) {
        want_rm[c] = (1 - factor) * rm_old[c] + factor * m.mean[c];
        want_rv[c] = (1 - factor) * rv_old[c] + factor * m.var[c] * count / (count - 1);
      }
      expect_close(rm, want_rm, "resultRunningMean");
      expect_close(rv, want_rv, "resultRunningVariance");
      expect_close(sm, m.mean, "resultSaveMean");
      expect_close(si, invstd, "resultSaveInvVariance");
    }
}

TEST_P(CapiBatchNormHost, InferenceMatchesReference) {
  const BnCase& bc = GetParam();
  const auto mean = random_vector(channels, rng), var = random_vector(channels, rng, 2.0);
  const std::vector<double> mean_d(mean.begin(), mean.end()), var_d(var.begin(), var.end());
  split_for(ooc::Operation::batchnorm_forward_inference);
  const float alpha = 0.5f, beta = -1.0f;
  for (const bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "direct DMA" : "staged");
    const HostDirectAccess access(direct);
    const auto y_old = random_vector(x.size(), rng);
    std::vector<float> y = y_old;
    ASSERT_EQ(ooc_cudnnBatchNormalizationForwardInference(kHandle, bc.mode, &alpha, &beta, xd.get(), x.data(),
                                                         xd.get(), y.data(), pd.get(), scale.data(), bias.data(),
                                                         mean.data(), var.data(), eps),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    expect_close(y, blended(normalize_ref(norm, x, mean_d, var_d, eps, scale, bias), alpha, beta, y_old), "y");
    expect_split_run("inference");
  }
}

TEST_P(CapiBatchNormHost, BackwardMatchesReferenceWithAndWithoutSavedStatistics) {
  const BnCase& bc = GetParam();
  const Moments m = moments_ref(norm, x);
  std::vector<double> invstd(m.var.size());
  for (size_t c = 0; c < invstd.size(); ++c) invstd[c] = 1.0 / std::sqrt(m.var[c] + eps);
  const std::vector<float> saved_mean(m.mean.begin(), m.mean.end()), saved_invstd(invstd.begin(), invstd.end());
  const BatchNormGrads g = batchnorm_grad_ref(norm, x, dy, scale, m.mean, invstd);
  split_for(ooc::Operation::batchnorm_backward);
  for (const bool saved : {true, false}) {
    for (const float beta : {0.0f, 0.25f}) {
      SCOPED_TRACE(std::string(saved ? "saved" : "recomputed") + " statistics, beta " + std::to_string(beta));
      const float alpha_data = 0.75f, alpha_param = 2.0f, beta_param = beta * 3.0f;
      const auto dx_old = beta != 0.0f ? random_vector(x.size(), rng) : std::vector<float>(x.size(), std::nanf(""));
      const auto ds_old = beta != 0.0f ? random_vector(channels, rng) : std::vector<float>(channels, std::nanf(""));
      const auto db_old = beta != 0.0f ? random_vector(channels, rng) : std::vector<float>(channels, std::nanf(""));
      std::vector<float> dx = dx_old, ds = ds_old, db = db_old;
      ASSERT_EQ(ooc_cudnnBatchNormalizationBackward(
                    kHandle, bc.mode, &alpha_data, &beta, &alpha_param, &beta_param, xd.get(), x.data(), xd.get(),
                    dy.data(), xd.get(), dx.data(), pd.get(), scale.data(), ds.data(), db.data(), eps,
                    saved ? saved_mean.data() : nullptr, saved ? saved_invstd.data() : nullptr),
                CUDNN_STATUS_SUCCESS)
          << last_error();
      expect_close(dx, blended(g.dx, alpha_data, beta, dx_old), "dx");
      expect_close(ds, blended(g.dscale, alpha_param, beta_param, ds_old), "dBnScaleResult");
      expect_close(db, blended(g.dbias, alpha_param, beta_param, db_old), "dBnBiasResult");
      expect_split_run("backward");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CapiBatchNormHost,
                         ::testing::Values(BnCase{"spatial_4d", CUDNN_BATCHNORM_SPATIAL, {4, 3, 5, 6}},
                                           BnCase{"spatial_5d", CUDNN_BATCHNORM_SPATIAL, {3, 2, 3, 4, 5}},
                                           BnCase{"spatial_persistent", CUDNN_BATCHNORM_SPATIAL_PERSISTENT, {4, 5, 8, 9}},
                                           BnCase{"per_activation_4d", CUDNN_BATCHNORM_PER_ACTIVATION, {6, 2, 3, 4}},
                                           BnCase{"per_activation_5d", CUDNN_BATCHNORM_PER_ACTIVATION, {7, 2, 3, 4, 5}},
                                           BnCase{"spatial_4d_nhwc", CUDNN_BATCHNORM_SPATIAL, {4, 3, 5, 6}, true},
                                           BnCase{"spatial_persistent_5d_nhwc", CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
                                                  {3, 4, 3, 4, 5}, true}),
                         [](const ::testing::TestParamInfo<BnCase>& info) { return std::string(info.param.name); });

// oocSetDevices spreads batch norm too (every device's statistics pass, one merge, every device's
// apply pass): training and backward give the one-device results bit for bit under a budget that
// splits both passes.
TEST_F(CapiBatchNormArgs, DevicesSpreadTrainingAndBackwardBitForBit) {
  std::mt19937 rng(31);
  x = random_vector(x.size(), rng, 1.5);
  dy = random_vector(dy.size(), rng);
  scale = random_vector(scale.size(), rng, 1.0);
  bias = random_vector(bias.size(), rng);
  const size_t limit = oocGetMemoryLimit();
  oocSetMemoryLimit(needed_bytes_of(ooc::plan_batchnorm, ooc::batchnorm_problem(ooc::Operation::batchnorm_backward, shape),
                                    ooc::BackendKind::host) * 3 / 2);
  struct Outputs {
    std::vector<float> y, mean, var, saved_mean, saved_invstd, dx, dscale, dbias;
  };
  auto run = [&]() {
    Outputs o;
    o.y.assign(y.size(), std::nanf("")), o.saved_mean.assign(3, std::nanf("")), o.saved_invstd.assign(3, std::nanf(""));
    o.mean.assign(3, 0.25f), o.var.assign(3, 2.0f);
    EXPECT_EQ(ooc_cudnnBatchNormalizationForwardTraining(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.get(),
                                                        x.data(), xd.get(), o.y.data(), pd.get(), scale.data(),
                                                        bias.data(), 0.1, o.mean.data(), o.var.data(), 1e-5,
                                                        o.saved_mean.data(), o.saved_invstd.data()),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    o.dx.assign(dx.size(), std::nanf("")), o.dscale.assign(3, std::nanf("")), o.dbias.assign(3, std::nanf(""));
    EXPECT_EQ(ooc_cudnnBatchNormalizationBackward(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.get(),
                                                  x.data(), xd.get(), dy.data(), xd.get(), o.dx.data(), pd.get(),
                                                  scale.data(), o.dscale.data(), o.dbias.data(), 1e-5,
                                                  o.saved_mean.data(), o.saved_invstd.data()),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    return o;
  };
  const Outputs one_device = run();
  const int devices[] = {0, 2, 1};
  ASSERT_EQ(oocSetDevices(devices, 3), CUDNN_STATUS_SUCCESS);
  const Outputs spread = run();
  EXPECT_EQ(oocSetDevices(nullptr, 0), CUDNN_STATUS_SUCCESS);
  oocSetMemoryLimit(limit);
  for (float v : one_device.dx) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(spread.y, one_device.y);
  EXPECT_EQ(spread.mean, one_device.mean);
  EXPECT_EQ(spread.var, one_device.var);
  EXPECT_EQ(spread.saved_mean, one_device.saved_mean);
  EXPECT_EQ(spread.saved_invstd, one_device.saved_invstd);
  EXPECT_EQ(spread.dx, one_device.dx);
  EXPECT_EQ(spread.dscale, one_device.dscale);
  EXPECT_EQ(spread.dbias, one_device.dbias);
}

}  // namespace
