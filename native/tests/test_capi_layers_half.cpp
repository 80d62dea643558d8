// The C API's layer entry points (AddTensor, Activation*, Pooling*, Softmax*, BatchNormalization*)
// on CUDNN_DATA_HALF and CUDNN_DATA_BFLOAT16 descriptors, without a GPU: each gives the same
// elements as the library call of that dtype (whose numerics tests/test_half_layers.py and
// tests/test_half_batchnorm.py check against float64), under a budget that splits it, with blends
// and poisoned outputs; mixed data types are NOT_SUPPORTED.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>

#include "backend/host/host_elements.hpp"
#include "capi_fixtures.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"

namespace {

using namespace ooc_test;

const cudnnHandle_t kHandle = dummy_handle();

struct HalfType {
  cudnnDataType_t cudnn;
  ooc::DType dtype;
};
const HalfType kHalfTypes[] = {{CUDNN_DATA_HALF, ooc::DType::float16}, {CUDNN_DATA_BFLOAT16, ooc::DType::bfloat16}};

using Bits = std::vector<uint16_t>;

// `count` random normal values of the dtype, as its bits.
Bits random_bits(size_t count, ooc::DType dtype, std::mt19937& rng) {
  Bits bits(count);
  const std::vector<float> v = random_vector(count, rng);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == ooc::DType::float16) {
      const __half h = ooc::host_elements::store<__half>(v[i]);
      std::memcpy(&bits[i], &h, 2);
    } else {
      const __nv_bfloat16 b = ooc::host_elements::store<__nv_bfloat16>(v[i]);
      std::memcpy(&bits[i], &b, 2);
    }
  }
  return bits;
}

// An output before a call: old values to blend (beta != 0), else all ones bits (a NaN in both
// types) that every element must overwrite.
Bits old_output(size_t count, float beta, ooc::DType dtype, std::mt19937& rng) {
  return beta != 0.0f ? random_bits(count, dtype, rng) : Bits(count, 0xffff);
}

// The C API call and the library call of the same dtype write the same elements into outputs
// that start alike; the C API call ran split.
void expect_same(const std::function<cudnnStatus_t(void*)>& capi, const std::function<void(void*)>& library,
                 size_t count, float beta, ooc::DType dtype, std::mt19937& rng, const std::string& what) {
  Bits got = old_output(count, beta, dtype, rng), want = got;
  ASSERT_EQ(capi(got.data()), CUDNN_STATUS_SUCCESS) << what << ": " << last_error();
  expect_split_run(what);
  library(want.data());
  EXPECT_EQ(got, want) << what;
  for (uint16_t b : got) ASSERT_NE(b, 0xffff) << what << ": an element was not written";
}

ooc::Options host_call(size_t limit) { return host_options(limit); }

using CapiLayerHost = HostBackendTest;

TEST_F(CapiLayerHost, HalfPrecisionLayersMatchTheLibrary) {
  std::mt19937 rng(test_seed(61));
  const Shape shape{3, 4, 7, 6}, flat{3, 4, 42}, pooled{3, 4, 4, 3}, bias{1, 4, 1, 1};
  const size_t n = 3 * 4 * 7 * 6, np = 3 * 4 * 4 * 3;
  const float one = 1.0f;
  for (const HalfType& t : kHalfTypes)
    for (const float beta : {0.0f, 0.5f}) {
      SCOPED_TRACE(std::string(ooc::dtype_name(t.dtype)) + ", beta " + std::to_string(beta));
      const float alpha = -0.75f;
      const Tensor d = tensor(shape, t.cudnn), pd = tensor(pooled, t.cudnn), bd = tensor(bias, t.cudnn);
      const Bits x = random_bits(n, t.dtype, rng), dy = random_bits(n, t.dtype, rng), b = random_bits(4, t.dtype, rng);

      size_t limit = split_budget([&](const ooc::Options& o) { return ooc::plan_add_tensor(bias, shape, true, o, t.dtype); });
      oocSetMemoryLimit(limit);
      expect_same([&](void* c) { return ooc_cudnnAddTensor(kHandle, &alpha, bd.get(), b.data(), &beta, d.get(), c); },
                  [&](void* c) { ooc::add_tensor(bias, shape, alpha, b.data(), beta, c, c, host_call(limit), nullptr, nullptr, t.dtype); },
                  n, beta, t.dtype, rng, "add tensor");

      const Activation act = activation(CUDNN_ACTIVATION_ELU, 0.8);
      limit = split_budget([&](const ooc::Options& o) { return ooc::plan_activation_forward(flat, o, t.dtype); });
      oocSetMemoryLimit(limit);
      expect_same([&](void* y) { return ooc_cudnnActivationForward(kHandle, act.get(), &alpha, d.get(), x.data(), &beta, d.get(), y); },
                  [&](void* y) {
                    ooc::activation_forward(flat, ooc::ActivationMode::elu, 0.8, x.data(), y, host_call(limit), nullptr,
                                            nullptr, alpha, beta, t.dtype);
                  },
                  n, beta, t.dtype, rng, "activation forward");

      for (const bool log : {false, true}) {
        const cudnnSoftmaxAlgorithm_t algo = log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
        limit = split_budget([&](const ooc::Options& o) {
          return ooc::plan_softmax_backward(flat, ooc::SoftmaxMode::channel, o, t.dtype);
        });
        oocSetMemoryLimit(limit);
        expect_same(
            [&](void* y) {
              return ooc_cudnnSoftmaxForward(kHandle, algo, CUDNN_SOFTMAX_MODE_CHANNEL, &alpha, d.get(), x.data(), &beta,
                                             d.get(), y);
            },
            [&](void* y) {
              ooc::softmax_forward(flat, ooc::SoftmaxMode::channel, log, x.data(), y, host_call(limit), nullptr, nullptr,
                                   alpha, beta, t.dtype);
            },
            n, beta, t.dtype, rng, log ? "log-softmax forward" : "softmax forward");
        expect_same(
            [&](void* dx) {
              return ooc_cudnnSoftmaxBackward(kHandle, algo, CUDNN_SOFTMAX_MODE_CHANNEL, &alpha, d.get(), x.data(),
                                              d.get(), dy.data(), &beta, d.get(), dx);
            },
            [&](void* dx) {
              ooc::softmax_backward(flat, ooc::SoftmaxMode::channel, log, x.data(), dy.data(), dx, host_call(limit),
                                    nullptr, nullptr, alpha, beta, t.dtype);
            },
            n, beta, t.dtype, rng, log ? "log-softmax backward" : "softmax backward");
      }

      for (const auto& [mode, pool_mode] : {std::pair{CUDNN_POOLING_MAX, ooc::PoolMode::max},
                                           std::pair{CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, ooc::PoolMode::avg},
                                           std::pair{CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                                     ooc::PoolMode::avg_exclude_pad}}) {
        SCOPED_TRACE("pooling mode " + std::to_string(mode));
        const Pooling pool = pooling(mode, {3, 2}, {1, 0}, {2, 2});  // [7, 6] -> [4, 3]
        ooc::ConvProblem fp = ooc::pool_problem(shape, {3, 2}, {2, 2}, {1, 0}, t.dtype);
        fp.alpha = alpha;
        fp.beta = beta;
        const ooc::ConvProblem bp = ooc::pool_backward_problem(fp);
        limit = split_budget([&](const ooc::Options& o) { return ooc::plan_pool_forward(fp, o); });
        oocSetMemoryLimit(limit);
        Bits y(np, 0);
        expect_same(
            [&](void* out) {
              return ooc_cudnnPoolingForward(kHandle, pool.get(), &alpha, d.get(), x.data(), &beta, pd.get(), out);
            },
            [&](void* out) { ooc::pool_forward(fp, pool_mode, x.data(), out, host_call(limit)); }, np, beta, t.dtype,
            rng, "pooling forward");
        ooc::ConvProblem plain = fp;
        plain.alpha = 1.0;
        plain.beta = 0.0;
        ooc::pool_forward(plain, pool_mode, x.data(), y.data(), host_call(0));
        const Bits dq = random_bits(np, t.dtype, rng);
        limit = split_budget([&](const ooc::Options& o) { return ooc::plan_pool_backward(bp, o); });
        oocSetMemoryLimit(limit);
        expect_same(
            [&](void* dx) {
              return ooc_cudnnPoolingBackward(kHandle, pool.get(), &alpha, pd.get(), y.data(), pd.get(), dq.data(),
                                              d.get(), x.data(), &beta, d.get(), dx);
            },
            [&](void* dx) { ooc::pool_backward(bp, pool_mode, y.data(), dq.data(), x.data(), dx, host_call(limit)); },
            n, beta, t.dtype, rng, "pooling backward");
      }
    }
}

// Batch norm of half x: float per-channel tensors (cuDNN's rule), statistics as the library's.
TEST_F(CapiLayerHost, HalfPrecisionBatchNormMatchesTheLibrary) {
  std::mt19937 rng(test_seed(62));
  const Shape shape{4, 3, 5, 6};
  const size_t n = 4 * 3 * 5 * 6;
  const float one = 1.0f, zero = 0.0f;
  const std::vector<float> scale = random_vector(3, rng), bias = random_vector(3, rng);
  const std::vector<float> mean = random_vector(3, rng), var(3, 0.75f);
  for (const HalfType& t : kHalfTypes) {
    SCOPED_TRACE(ooc::dtype_name(t.dtype));
    const Tensor d = tensor(shape, t.cudnn), pd = tensor({1, 3, 1, 1});
    const Bits x = random_bits(n, t.dtype, rng), dy = random_bits(n, t.dtype, rng);
    const ooc::ConvProblem inference = ooc::batchnorm_problem(ooc::Operation::batchnorm_forward_inference, shape, t.dtype);
    const ooc::ConvProblem training = ooc::batchnorm_problem(ooc::Operation::batchnorm_forward_training, shape, t.dtype);
    const ooc::ConvProblem backward = ooc::batchnorm_problem(ooc::Operation::batchnorm_backward, shape, t.dtype);
    // Each call under a budget that splits it (the backward's smallest plan is larger than the
    // forwards', so one budget for all would leave the forwards whole).
    auto split_limit = [&](const ooc::ConvProblem& p) {
      const size_t limit = split_budget([&](const ooc::Options& o) { return ooc::plan_batchnorm(p, o); });
      oocSetMemoryLimit(limit);
      return limit;
    };
    size_t limit = split_limit(inference);
    expect_same(
        [&](void* y) {
          return ooc_cudnnBatchNormalizationForwardInference(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.get(),
                                                             x.data(), d.get(), y, pd.get(), scale.data(), bias.data(),
                                                             mean.data(), var.data(), 1e-4);
        },
        [&](void* y) {
          ooc::batchnorm_forward_inference(inference, x.data(), scale.data(), bias.data(), mean.data(), var.data(),
                                           1e-4, y, host_call(limit));
        },
        n, 0.0f, t.dtype, rng, "batch norm inference");
    std::vector<float> saved_mean(3), saved_invstd(3), lib_mean(3), lib_invstd(3);
    limit = split_limit(training);
    expect_same(
        [&](void* y) {
          return ooc_cudnnBatchNormalizationForwardTraining(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.get(),
                                                            x.data(), d.get(), y, pd.get(), scale.data(), bias.data(),
                                                            0.1, nullptr, nullptr, 1e-4, saved_mean.data(),
                                                            saved_invstd.data());
        },
        [&](void* y) {
          ooc::batchnorm_forward_training(training, x.data(), scale.data(), bias.data(), 1e-4, 0.1, nullptr, nullptr, y,
                                          lib_mean.data(), lib_invstd.data(), host_call(limit));
        },
        n, 0.0f, t.dtype, rng, "batch norm training");
    EXPECT_EQ(saved_mean, lib_mean);
    EXPECT_EQ(saved_invstd, lib_invstd);
    std::vector<float> dscale(3), dbias(3), lib_dscale(3), lib_dbias(3);
    limit = split_limit(backward);
    expect_same(
        [&](void* dx) {
          return ooc_cudnnBatchNormalizationBackward(kHandle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
                                                     d.get(), x.data(), d.get(), dy.data(), d.get(), dx, pd.get(),
                                                     scale.data(), dscale.data(), dbias.data(), 1e-4,
                                                     saved_mean.data(), saved_invstd.data());
        },
        [&](void* dx) {
          ooc::batchnorm_backward(backward, x.data(), dy.data(), scale.data(), saved_mean.data(), saved_invstd.data(),
                                  dx, lib_dscale.data(), lib_dbias.data(), host_call(limit));
        },
        n, 0.0f, t.dtype, rng, "batch norm backward");
    EXPECT_EQ(dscale, lib_dscale);
    EXPECT_EQ(dbias, lib_dbias);
  }
}

TEST_F(CapiLayerHost, MixedDataTypesInALayerCallAreNotSupported) {
  const Shape shape{2, 3, 6, 5};
  const Tensor f = tensor(shape), h = tensor(shape, CUDNN_DATA_HALF), bh = tensor({2, 3, 3, 2}, CUDNN_DATA_BFLOAT16);
  std::vector<float> x(60, 0.5f), y(60, 0.0f);
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(ooc_cudnnSoftmaxForward(kHandle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, f.get(), x.data(),
                                    &zero, h.get(), y.data()),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(ooc_cudnnAddTensor(kHandle, &one, h.get(), x.data(), &one, f.get(), y.data()), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "cDesc")) << last_error();
  const Pooling max2 = pooling(CUDNN_POOLING_MAX, {2, 2}, {0, 0}, {2, 2});
  EXPECT_EQ(ooc_cudnnPoolingForward(kHandle, max2.get(), &one, h.get(), x.data(), &zero, bh.get(), y.data()),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  const Tensor double_x = tensor(shape, CUDNN_DATA_DOUBLE);
  EXPECT_EQ(ooc_cudnnSoftmaxForward(kHandle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, double_x.get(),
                                    x.data(), &zero, double_x.get(), y.data()),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "xDesc")) << last_error();
}

}  // namespace
