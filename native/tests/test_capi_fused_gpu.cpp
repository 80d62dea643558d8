// The C API's fused entry points on a GPU: each against the composition of plain cuDNN calls it
// replaces (capi_fused_compositions.hpp) on device copies of the same inputs, for device, pinned,
// pageable and mixed caller memory, whole and split (capi_gpu_fixtures.hpp). The fused calls always
// run chunked, so both sides are held to fp32 rounding. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "capi_fused_compositions.hpp"
#include "capi_gpu_fixtures.hpp"
#include "conv_run.hpp"
#include "ooc/fused.hpp"

namespace {

using namespace ooc_test;

class CapiFusedGpu : public CapiGpuTest {
 protected:
  void SetUp() override {
    CapiGpuTest::SetUp();
    always_out_of_core_ = true;
  }
  std::mt19937 rng{test_seed(81)};
  // x [4, 8, 20, 18] * w [16, 8, 3, 3], padding 1: y [4, 16, 20, 18].
  ConvDescriptors c{{4, 8, 20, 18}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}};
  const ooc::ConvProblem& fwd = c.problem;
  Pooling pool = pooling(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, {2, 2}, {0, 0}, {2, 2});
  const ooc::ConvProblem pool_p = ooc::pool_problem(fwd.y_shape(), {2, 2}, {2, 2}, {0, 0});
  Tensor pooled = tensor(pool_p.y_shape());
  const ooc::ConvProblem bwd = ooc::ConvProblem::backward_data(fwd.y_shape(), fwd.w_shape(), fwd.x_shape(), {1, 1},
                                                               {1, 1}, {1, 1}, 1, 1.0, 0.0);

  std::vector<float> random_of(int64_t count) { return random_vector(static_cast<size_t>(count), rng); }
  template <typename PlanFor>
  size_t cuda_split(PlanFor plan) {
    return split_budget(plan, ooc::BackendKind::cuda);
  }
};

TEST_P(CapiFusedGpu, ConvolutionBiasActivationPoolingForward) {
  const Activation act = activation(CUDNN_ACTIVATION_ELU, 0.9);
  const float alpha1 = 0.75f, alpha2 = -0.5f;
  ooc::ConvProblem conv = fwd;
  conv.alpha = alpha1;
  conv.beta = alpha2;
  conv.has_bias = true;
  // x, w, z, bias, y (pooled), t (the composition's scratch)
  compare_with_library(
      {random_of(fwd.x_elements()), random_of(fwd.w_elements()), random_of(fwd.y_elements()), random_of(fwd.k),
       random_of(pool_p.y_elements()), random_of(fwd.y_elements())},
      {4},
      cuda_split([&](const ooc::Options& o) {
        return ooc::plan_conv_bias_activation_pooling_forward(conv, pool_p, o);
      }),
      [&](bool use_ooc, const std::vector<void*>& t) {
        if (use_ooc)
          return ooc_cudnnConvolutionBiasActivationPoolingForward(handle_, &alpha1, c.x.get(), t[0], c.w.get(), t[1],
                                                                  c.conv.get(), &alpha2, c.y.get(), t[2],
                                                                  c.bias.get(), t[3], act.get(), pool.get(),
                                                                  pooled.get(), t[4]);
        return compose_conv_bias_activation_pooling(kCudnnCalls, handle_, alpha1, c.x.get(), t[0], c.w.get(), t[1],
                                                    c.conv.get(), alpha2, c.y.get(), t[2], c.bias.get(), t[3],
                                                    act.get(), pool.get(), t[5], pooled.get(), t[4]);
      });
}

TEST_P(CapiFusedGpu, DeconvolutionBiasActivationForward) {
  // x [4, 16, 9, 8] -> y [4, 8, 18, 16]: stride 2, padding 1, output_padding 1.
  const Shape xs{4, 16, 9, 8}, ws{16, 8, 3, 3}, ys{4, 8, 18, 16};
  const Tensor xd = tensor(xs), yd = tensor(ys), bd = tensor({1, 8, 1, 1});
  const Filter wd = filter(ws);
  const Convolution cd = convolution({1, 1}, {2, 2}, {1, 1});
  const Activation act = activation(CUDNN_ACTIVATION_RELU);
  const float alpha1 = 1.25f, alpha2 = 0.5f;
  const ooc::ConvProblem deconv = ooc::deconv_problem(xs, ws, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, alpha1, alpha2, true);
  // x, w, z, bias, y
  compare_with_library(
      {random_of(product(xs)), random_of(product(ws)), random_of(product(ys)), random_of(8), random_of(product(ys))},
      {4}, cuda_split([&](const ooc::Options& o) { return ooc::plan_deconv_bias_activation_forward(deconv, o); }),
      [&](bool use_ooc, const std::vector<void*>& t) {
        if (use_ooc)
          return ooc_cudnnDeconvolutionBiasActivationForward(handle_, &alpha1, xd.get(), t[0], wd.get(), t[1],
                                                             cd.get(), &alpha2, yd.get(), t[2], bd.get(), t[3],
                                                             act.get(), yd.get(), t[4]);
        return compose_deconv_bias_activation(kCudnnCalls, handle_, alpha1, xd.get(), t[0], wd.get(), t[1], cd.get(),
                                              alpha2, t[2], bd.get(), t[3], act.get(), yd.get(), t[4]);
      });
}

TEST_P(CapiFusedGpu, ConvolutionBackwardDataFilterBias) {
  // x, dy, w, dx, dw, db
  compare_with_library(
      {random_of(fwd.x_elements()), random_of(fwd.y_elements()), random_of(fwd.w_elements()),
       random_of(fwd.x_elements()), random_of(fwd.w_elements()), random_of(fwd.k)},
      {3, 4, 5}, cuda_split([&](const ooc::Options& o) { return ooc::plan_conv_backward_data_filter_bias(bwd, o); }),
      [&](bool use_ooc, const std::vector<void*>& t) {
        if (use_ooc)
          return ooc_cudnnConvolutionBackwardDataFilterBias(handle_, c.x.get(), t[0], c.y.get(), t[1], c.w.get(), t[2],
                                                            c.conv.get(), c.x.get(), t[3], c.w.get(), t[4],
                                                            c.bias.get(), t[5]);
        return compose_backward_data_filter_bias(kCudnnCalls, handle_, c.x.get(), t[0], c.y.get(), t[1], c.w.get(),
                                                 t[2], c.conv.get(), t[3], t[4], c.bias.get(), t[5]);
      });
}

TEST_P(CapiFusedGpu, ActivationConvolutionBackwardDataFilterBias) {
  const Activation act = activation(CUDNN_ACTIVATION_SWISH, 1.2);
  ooc::FusedActivation fa;
  fa.mode = ooc::ActivationMode::swish;
  fa.coef = 1.2;
  // x, w, y, pre, dy, dx, dw, db, dz (the composition's scratch)
  std::vector<float> pre = random_of(fwd.y_elements()), y(pre.size());
  for (size_t i = 0; i < pre.size(); ++i) y[i] = static_cast<float>(pre[i] / (1.0 + std::exp(-1.2 * pre[i])));
  compare_with_library(
      {random_of(fwd.x_elements()), random_of(fwd.w_elements()), y, pre, random_of(fwd.y_elements()),
       random_of(fwd.x_elements()), random_of(fwd.w_elements()), random_of(fwd.k), random_of(fwd.y_elements())},
      {5, 6, 7},
      cuda_split([&](const ooc::Options& o) {
        return ooc::plan_activation_conv_backward_data_filter_bias(bwd, fa, true, o);
      }),
      [&](bool use_ooc, const std::vector<void*>& t) {
        if (use_ooc)
          return ooc_cudnnActivationConvolutionBackwardDataFilterBias(
              handle_, act.get(), c.x.get(), t[0], c.w.get(), t[1], c.conv.get(), c.y.get(), t[2], c.y.get(), t[3],
              c.y.get(), t[4], c.x.get(), t[5], c.w.get(), t[6], c.bias.get(), t[7]);
        return compose_activation_backward_data_filter_bias(kCudnnCalls, handle_, act.get(), c.x.get(), t[0],
                                                            c.w.get(), t[1], c.conv.get(), c.y.get(), t[2], t[3],
                                                            t[4], t[8], t[5], t[6], c.bias.get(), t[7]);
      });
}

TEST_P(CapiFusedGpu, PoolingActivationConvolutionBackwardDataFilterBias) {
  const Activation act = activation(CUDNN_ACTIVATION_RELU);
  ooc::FusedActivation fa;  // relu
  // pre and y = relu(pre); q: y's 2x2 averages.
  std::vector<float> pre = random_of(fwd.y_elements()), y(pre.size()), q(static_cast<size_t>(pool_p.y_elements()));
  for (size_t i = 0; i < pre.size(); ++i) y[i] = pre[i] > 0 ? pre[i] : 0.0f;
  const Shape ys = fwd.y_shape(), qs = pool_p.y_shape();
  for (int64_t nc = 0; nc < ys[0] * ys[1]; ++nc)
    for (int64_t i = 0; i < qs[2]; ++i)
      for (int64_t j = 0; j < qs[3]; ++j) {
        double sum = 0;
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t b = 0; b < 2; ++b) sum += y[static_cast<size_t>((nc * ys[2] + 2 * i + a) * ys[3] + 2 * j + b)];
        q[static_cast<size_t>((nc * qs[2] + i) * qs[3] + j)] = static_cast<float>(sum / 4);
      }
  // x, w, y, pre, q, dq, dx, dw, db, dz (the composition's scratch)
  compare_with_library(
      {random_of(fwd.x_elements()), random_of(fwd.w_elements()), y, pre, q, random_of(pool_p.y_elements()),
       random_of(fwd.x_elements()), random_of(fwd.w_elements()), random_of(fwd.k), random_of(fwd.y_elements())},
      {6, 7, 8},
      cuda_split([&](const ooc::Options& o) {
        return ooc::plan_pooling_activation_conv_backward_data_filter_bias(bwd, fa, pool_p, true, o);
      }),
      [&](bool use_ooc, const std::vector<void*>& t) {
        if (use_ooc)
          return ooc_cudnnPoolingActivationConvolutionBackwardDataFilterBias(
              handle_, pool.get(), act.get(), c.x.get(), t[0], c.w.get(), t[1], c.conv.get(), c.y.get(), t[2],
              c.y.get(), t[3], pooled.get(), t[4], pooled.get(), t[5], c.x.get(), t[6], c.w.get(), t[7],
              c.bias.get(), t[8]);
        return compose_pooling_activation_backward_data_filter_bias(
            kCudnnCalls, handle_, pool.get(), act.get(), c.x.get(), t[0], c.w.get(), t[1], c.conv.get(), c.y.get(),
            t[2], t[3], pooled.get(), t[4], t[5], t[9], t[6], t[7], c.bias.get(), t[8]);
      });
}

INSTANTIATE_TEST_SUITE_P(Memory, CapiFusedGpu, gpu_cases(), case_name);

}  // namespace
