// The C API's layer entry points and ooc_cublasSgemm on a GPU: each against plain cuDNN or cuBLAS
// on the same inputs, for device, pinned, pageable and mixed caller memory, whole and under a
// budget that splits it (capi_gpu_fixtures.hpp), with alpha/beta blends. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "capi_gpu_fixtures.hpp"
#include "capi_references.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cublas.h"

namespace {

using namespace ooc_test;

using CapiLayersGpu = CapiGpuTest;

// 61440 floats: twice the smallest plan is well below it.
const Shape kShape{8, 16, 24, 20};

std::vector<float> random_of(const Shape& s, std::mt19937& rng, double mean = 0.0) {
  return random_vector(static_cast<size_t>(product(s)), rng, mean);
}

template <typename PlanFor>
size_t cuda_split(PlanFor plan) {
  return split_budget(plan, ooc::BackendKind::cuda);
}

Shape flat(const Shape& s) { return {s[0], s[1], product(s) / (s[0] * s[1])}; }

TEST_P(CapiLayersGpu, AddTensor) {
  std::mt19937 rng(test_seed(51));
  const Shape a{1, 16, 1, 20};
  const Tensor ad = tensor(a), cd = tensor(kShape);
  const float alpha = 1.5f, beta = 0.5f;
  compare_with_library({random_of(a, rng), random_of(kShape, rng)}, {1},
                       cuda_split([&](const ooc::Options& o) { return ooc::plan_add_tensor(a, kShape, true, o); }),
                       [&](bool use_ooc, const std::vector<void*>& t) {
                         auto fn = use_ooc ? ooc_cudnnAddTensor : cudnnAddTensor;
                         return fn(handle_, &alpha, ad.get(), t[0], &beta, cd.get(), t[1]);
                       });
}

TEST_P(CapiLayersGpu, ActivationForward) {
  std::mt19937 rng(test_seed(52));
  const Tensor d = tensor(kShape);
  const float alpha = 1.25f, beta = 0.5f;
  const size_t budget = cuda_split([&](const ooc::Options& o) { return ooc::plan_activation_forward(flat(kShape), o); });
  for (const auto& [mode, coef] : {std::pair{CUDNN_ACTIVATION_ELU, 0.8}, std::pair{CUDNN_ACTIVATION_SWISH, 1.5},
                                   std::pair{CUDNN_ACTIVATION_CLIPPED_RELU, 0.5}}) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    const Activation act = activation(mode, coef);
    compare_with_library({random_of(kShape, rng), random_of(kShape, rng)}, {1}, budget,
                         [&](bool use_ooc, const std::vector<void*>& t) {
                           auto fn = use_ooc ? ooc_cudnnActivationForward : cudnnActivationForward;
                           return fn(handle_, act.get(), &alpha, d.get(), t[0], &beta, d.get(), t[1]);
                         });
  }
}

TEST_P(CapiLayersGpu, ActivationBackward) {
  std::mt19937 rng(test_seed(53));
  const Tensor d = tensor(kShape);
  const Activation act = activation(CUDNN_ACTIVATION_SIGMOID);
  const float alpha = 1.0f, beta = 0.5f;
  // y, dy, x, dx
  compare_with_library(
      {random_of(kShape, rng, 0.5), random_of(kShape, rng), random_of(kShape, rng), random_of(kShape, rng)}, {3},
      cuda_split([&](const ooc::Options& o) { return ooc::plan_activation_backward(flat(kShape), ooc::ActivationMode::elu, o); }),
      [&](bool use_ooc, const std::vector<void*>& t) {
        auto fn = use_ooc ? ooc_cudnnActivationBackward : cudnnActivationBackward;
        return fn(handle_, act.get(), &alpha, d.get(), t[0], d.get(), t[1], d.get(), t[2], &beta, d.get(), t[3]);
      });
}

struct PoolSetup {
  cudnnPoolingMode_t mode;
  PoolGeometry g;
};

const PoolSetup kGpuPools[] = {
    // Deterministic max: cuDNN's plain max backward adds overlapping windows' gradients by atomics.
    {CUDNN_POOLING_MAX_DETERMINISTIC, {kShape, {3, 3}, {1, 1}, {2, 2}}},
    {CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, {kShape, {2, 2}, {1, 1}, {2, 2}}},
    {CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, {{2, 8, 10, 12, 14}, {3, 3, 3}, {1, 1, 1}, {1, 2, 2}}},
};

TEST_P(CapiLayersGpu, PoolingForwardAndBackward) {
  std::mt19937 rng(test_seed(54));
  const float alpha = 0.75f, beta = 0.5f;
  for (const PoolSetup& ps : kGpuPools) {
    SCOPED_TRACE("mode " + std::to_string(ps.mode) + ", x " + shape_str(ps.g.x));
    const Shape y_shape = pooled(ps.g);
    const Tensor xd = tensor(ps.g.x), yd = tensor(y_shape);
    const Pooling pool = pooling(ps.mode, ps.g.window, ps.g.padding, ps.g.stride);
    const ooc::ConvProblem p = ooc::pool_problem(ps.g.x, ps.g.window, ps.g.stride, ps.g.padding);
    compare_with_library({random_of(ps.g.x, rng), random_of(y_shape, rng)}, {1},
                         cuda_split([&](const ooc::Options& o) { return ooc::plan_pool_forward(p, o); }),
                         [&](bool use_ooc, const std::vector<void*>& t) {
                           auto fn = use_ooc ? ooc_cudnnPoolingForward : cudnnPoolingForward;
                           return fn(handle_, pool.get(), &alpha, xd.get(), t[0], &beta, yd.get(), t[1]);
                         });
    // y as the forward computes it, so that max pooling's gradient has a maximum to go to.
    const std::vector<float> x = random_of(ps.g.x, rng);
    const std::vector<double> y =
        pool_ref(ps.g, ps.mode == CUDNN_POOLING_MAX_DETERMINISTIC ? CUDNN_POOLING_MAX : ps.mode, x);
    compare_with_library(
        {std::vector<float>(y.begin(), y.end()), random_of(y_shape, rng), x, random_of(ps.g.x, rng)}, {3},
        cuda_split([&](const ooc::Options& o) { return ooc::plan_pool_backward(ooc::pool_backward_problem(p), o); }),
        [&](bool use_ooc, const std::vector<void*>& t) {
          auto fn = use_ooc ? ooc_cudnnPoolingBackward : cudnnPoolingBackward;
          return fn(handle_, pool.get(), &alpha, yd.get(), t[0], yd.get(), t[1], xd.get(), t[2], &beta, xd.get(), t[3]);
        });
  }
}

TEST_P(CapiLayersGpu, SoftmaxForwardAndBackward) {
  std::mt19937 rng(test_seed(55));
  const Tensor d = tensor(kShape);
  const float alpha = 1.0f, beta = 0.25f;
  for (const auto& [algo, mode] : {std::pair{CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL},
                                   std::pair{CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE}}) {
    SCOPED_TRACE("algo " + std::to_string(algo) + ", mode " + std::to_string(mode));
    const ooc::SoftmaxMode over =
        mode == CUDNN_SOFTMAX_MODE_CHANNEL ? ooc::SoftmaxMode::channel : ooc::SoftmaxMode::instance;
    compare_with_library(
        {random_of(kShape, rng), random_of(kShape, rng)}, {1},
        cuda_split([&](const ooc::Options& o) { return ooc::plan_softmax_forward(flat(kShape), over, o); }),
        [&, algo = algo, mode = mode](bool use_ooc, const std::vector<void*>& t) {
          auto fn = use_ooc ? ooc_cudnnSoftmaxForward : cudnnSoftmaxForward;
          return fn(handle_, algo, mode, &alpha, d.get(), t[0], &beta, d.get(), t[1]);
        });
    const std::vector<double> y = softmax_ref(kShape, mode, algo == CUDNN_SOFTMAX_LOG, random_of(kShape, rng));
    compare_with_library(
        {std::vector<float>(y.begin(), y.end()), random_of(kShape, rng), random_of(kShape, rng)}, {2},
        cuda_split([&](const ooc::Options& o) { return ooc::plan_softmax_backward(flat(kShape), over, o); }),
        [&, algo = algo, mode = mode](bool use_ooc, const std::vector<void*>& t) {
          auto fn = use_ooc ? ooc_cudnnSoftmaxBackward : cudnnSoftmaxBackward;
          return fn(handle_, algo, mode, &alpha, d.get(), t[0], d.get(), t[1], &beta, d.get(), t[2]);
        });
  }
}

class CapiBatchNormGpu : public CapiGpuTest {
 protected:
  // cuDNN does not promise batch norm's per-channel reductions run in the same order twice.
  CapiBatchNormGpu() { exact_direct_ = false; }
  size_t budget(ooc::Operation op) {
    return cuda_split([&](const ooc::Options& o) { return ooc::plan_batchnorm(ooc::batchnorm_problem(op, kShape), o); });
  }
  std::mt19937 rng{test_seed(56)};
  const Tensor xd = tensor(kShape), pd = tensor({1, kShape[1], 1, 1});
  const Shape channels{kShape[1]};
  const double eps = 1e-4;
};

TEST_P(CapiBatchNormGpu, Training) {
  const float alpha = 1.0f, beta = 0.5f;
  // x, scale, bias, y, running mean, running variance, saved mean, saved inverse deviation
  compare_with_library({random_of(kShape, rng, 1.0), random_of(channels, rng, 1.0), random_of(channels, rng),
                        random_of(kShape, rng), random_of(channels, rng), random_of(channels, rng, 2.0),
                        random_of(channels, rng), random_of(channels, rng)},
                       {3, 4, 5, 6, 7}, budget(ooc::Operation::batchnorm_forward_training),
                       [&](bool use_ooc, const std::vector<void*>& t) {
                         auto fn = use_ooc ? ooc_cudnnBatchNormalizationForwardTraining
                                           : cudnnBatchNormalizationForwardTraining;
                         return fn(handle_, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, xd.get(), t[0], xd.get(), t[3],
                                   pd.get(), t[1], t[2], 0.2, t[4], t[5], eps, t[6], t[7]);
                       });
}

TEST_P(CapiBatchNormGpu, Inference) {
  const float alpha = 0.5f, beta = 1.0f;
  // x, scale, bias, mean, variance, y
  compare_with_library({random_of(kShape, rng), random_of(channels, rng, 1.0), random_of(channels, rng),
                        random_of(channels, rng), random_of(channels, rng, 2.0), random_of(kShape, rng)},
                       {5}, budget(ooc::Operation::batchnorm_forward_inference),
                       [&](bool use_ooc, const std::vector<void*>& t) {
                         auto fn = use_ooc ? ooc_cudnnBatchNormalizationForwardInference
                                           : cudnnBatchNormalizationForwardInference;
                         return fn(handle_, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, xd.get(), t[0], xd.get(), t[5],
                                   pd.get(), t[1], t[2], t[3], t[4], eps);
                       });
}

TEST_P(CapiBatchNormGpu, BackwardWithAndWithoutSavedStatistics) {
  const std::vector<float> x = random_of(kShape, rng, 1.0);
  // The forward's statistics of this x, as a training call would have saved them.
  const Moments m = moments_ref(kShape, x);
  std::vector<float> mean(m.mean.size()), invstd(m.var.size());
  for (size_t c = 0; c < mean.size(); ++c) {
    mean[c] = static_cast<float>(m.mean[c]);
    invstd[c] = static_cast<float>(1.0 / std::sqrt(m.var[c] + eps));
  }
  const float alpha_data = 1.0f, beta_data = 0.5f, alpha_param = 1.0f, beta_param = 1.0f;
  for (const bool saved : {true, false}) {
    SCOPED_TRACE(saved ? "saved statistics" : "recomputed statistics");
    // x, dy, scale, saved mean, saved inverse deviation, dx, dscale, dbias
    compare_with_library({x, random_of(kShape, rng), random_of(channels, rng, 1.0), mean, invstd,
                          random_of(kShape, rng), random_of(channels, rng), random_of(channels, rng)},
                         {5, 6, 7}, budget(ooc::Operation::batchnorm_backward),
                         [&](bool use_ooc, const std::vector<void*>& t) {
                           auto fn = use_ooc ? ooc_cudnnBatchNormalizationBackward : cudnnBatchNormalizationBackward;
                           return fn(handle_, CUDNN_BATCHNORM_SPATIAL, &alpha_data, &beta_data, &alpha_param,
                                     &beta_param, xd.get(), t[0], xd.get(), t[1], xd.get(), t[5], pd.get(), t[2], t[6],
                                     t[7], eps, saved ? t[3] : nullptr, saved ? t[4] : nullptr);
                         });
  }
}

struct SgemmCase {
  cublasOperation_t ta, tb;
  int pad;
  float alpha, beta;
};

class CapiSgemmGpu : public CapiGpuTest {
 protected:
  void check(const SgemmCase& sc) {
    const int m = 300, n = 257, k = 190;
    const bool ta = sc.ta != CUBLAS_OP_N, tb = sc.tb != CUBLAS_OP_N;
    const int lda = (ta ? k : m) + sc.pad, ldb = (tb ? n : k) + sc.pad, ldc = m + sc.pad;
    std::mt19937 rng(test_seed(57));
    compare_with_library(
        {random_vector(static_cast<size_t>(lda) * (ta ? m : k), rng),
         random_vector(static_cast<size_t>(ldb) * (tb ? k : n), rng), random_vector(static_cast<size_t>(ldc) * n, rng)},
        {2},
        cuda_split([&](const ooc::Options& o) {
          return ooc::plan_matmul(ooc::matmul_problem({n, k}, {k, m}, sc.alpha, sc.beta, false), o);
        }),
        [&](bool use_ooc, const std::vector<void*>& t) {
          auto fn = use_ooc ? ooc_cublasSgemm : cublasSgemm;
          return fn(cublas_, sc.ta, sc.tb, m, n, k, alpha_ptr, static_cast<const float*>(t[0]), lda,
                    static_cast<const float*>(t[1]), ldb, beta_ptr, static_cast<float*>(t[2]), ldc);
        });
  }
  const float* alpha_ptr = nullptr;
  const float* beta_ptr = nullptr;
};

TEST_P(CapiSgemmGpu, TransposesAndLeadingDimensions) {
  for (const SgemmCase& sc : {SgemmCase{CUBLAS_OP_N, CUBLAS_OP_N, 0, 1.0f, 0.0f},
                              SgemmCase{CUBLAS_OP_T, CUBLAS_OP_N, 3, 1.5f, 0.5f},
                              SgemmCase{CUBLAS_OP_N, CUBLAS_OP_T, 1, -1.0f, 1.0f},
                              SgemmCase{CUBLAS_OP_T, CUBLAS_OP_T, 0, 0.5f, 0.25f}}) {
    SCOPED_TRACE("ops " + std::to_string(sc.ta) + std::to_string(sc.tb) + ", pad " + std::to_string(sc.pad));
    alpha_ptr = &sc.alpha;
    beta_ptr = &sc.beta;
    check(sc);
  }
}

TEST_P(CapiSgemmGpu, DevicePointerModeScalars) {
  const float scalars[2] = {1.25f, -0.5f};
  void* device_scalars = nullptr;
  oocSetDeviceAllocationLimit(static_cast<size_t>(-1));
  ASSERT_EQ(ooc_cudaMalloc(&device_scalars, sizeof(scalars)), cudaSuccess);
  ASSERT_TRUE(ooc::is_device_memory(device_scalars));
  ASSERT_EQ(ooc_cudaMemcpy(device_scalars, scalars, sizeof(scalars), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  alpha_ptr = static_cast<const float*>(device_scalars);
  beta_ptr = alpha_ptr + 1;
  check(SgemmCase{CUBLAS_OP_N, CUBLAS_OP_T, 2, scalars[0], scalars[1]});
  EXPECT_EQ(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ooc_cudaFree(device_scalars), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Memory, CapiLayersGpu, gpu_cases(), case_name);
INSTANTIATE_TEST_SUITE_P(Memory, CapiBatchNormGpu, gpu_cases(), case_name);
INSTANTIATE_TEST_SUITE_P(Memory, CapiSgemmGpu, gpu_cases(), case_name);

}  // namespace
