// The C API's NHWC descriptors (CPU suite, host backend): packed channels-last tensor descriptors
// with CUDNN_TENSOR_NHWC filters run the convolution and its three gradients out of core, split,
// equal to float64 references computed on NCHW copies; mixed layouts, the fused forward and the
// layers with NHWC descriptors return CUDNN_STATUS_NOT_SUPPORTED naming the descriptor.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backward_plan_checks.hpp"
#include "conv_run.hpp"
#include "capi_fixtures.hpp"
#include "capi_layouts.hpp"

namespace {

using namespace ooc_test;

const cudnnHandle_t kDummyHandle = dummy_handle();

struct NhwcCase {
  const char* name;
  Shape x, w, padding, stride, dilation;
  int groups;
};

class CapiChannelsLast : public HostBackendTest, public ::testing::WithParamInterface<NhwcCase> {
 protected:
  const NhwcCase& c = GetParam();
  const NhwcConv d{c.x, c.w, c.padding, c.stride, c.dilation, c.groups};
  const ooc::ConvProblem& f = d.problem;
  std::mt19937 rng{test_seed(31)};
  // Channels-first inputs (the references') and their NHWC copies (the calls').
  const std::vector<float> x = random_vector(static_cast<size_t>(f.x_elements()), rng);
  const std::vector<float> w = random_vector(static_cast<size_t>(f.w_elements()), rng);
  const std::vector<float> dy = random_vector(static_cast<size_t>(f.y_elements()), rng);
  const std::vector<float> x_nhwc = to_layout(x, f.x_shape(), true), w_nhwc = to_layout(w, f.w_shape(), true),
                           dy_nhwc = to_layout(dy, f.y_shape(), true);
  float alpha = 1.25f, beta = 0.5f;

  std::vector<double> nhwc(const std::vector<double>& ref, const Shape& dims) { return to_layout(ref, dims, true); }
};

TEST_P(CapiChannelsLast, ForwardMatchesTheNchwReference) {
  const std::vector<float> old = random_vector(static_cast<size_t>(f.y_elements()), rng);
  std::vector<float> y = to_layout(old, f.y_shape(), true);
  ooc::ConvProblem p = f;
  p.alpha = alpha, p.beta = beta;
  oocSetMemoryLimit(split_budget([&](const ooc::Options& o) { return ooc::plan_conv_forward(p, o); }));
  ASSERT_EQ(ooc_cudnnConvolutionForward(kDummyHandle, &alpha, d.x.get(), x_nhwc.data(), d.w.get(), w_nhwc.data(),
                                        d.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta,
                                        d.y.get(), y.data()),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  std::vector<double> ref(static_cast<size_t>(p.y_elements()), 0.0);  // grouped: for_each_product's taps
  for_each_product(p, [&](size_t xi, size_t wi, size_t yi) { ref[yi] += double(x[xi]) * double(w[wi]); });
  expect_close(y, nhwc(blended(std::move(ref), p, old), f.y_shape()), "y");
  expect_split_run("forward");
  EXPECT_NE(last_plan().find("channels_last"), std::string::npos) << last_plan();
}

TEST_P(CapiChannelsLast, GradientsMatchTheNchwReferences) {
  for (const ooc::Operation op :
       {ooc::Operation::backward_data, ooc::Operation::backward_filter, ooc::Operation::backward_bias}) {
    SCOPED_TRACE(op_label(op));
    BackwardSpec spec = backward_spec(op, c.x, c.w, c.stride, c.padding, c.dilation, alpha, beta);
    spec.groups = c.groups;
    const ooc::ConvProblem p = spec.problem();
    const std::vector<float> old = random_vector(static_cast<size_t>(gradient_elements(p)), rng);
    const Shape out_dims = op == ooc::Operation::backward_data ? f.x_shape() : f.w_shape();
    std::vector<float> out = op == ooc::Operation::backward_bias ? old : to_layout(old, out_dims, true);
    oocSetMemoryLimit(split_budget([&](const ooc::Options& o) {
      return op == ooc::Operation::backward_data     ? ooc::plan_conv_backward_data(p, o)
             : op == ooc::Operation::backward_filter ? ooc::plan_conv_backward_filter(p, o)
                                                     : ooc::plan_conv_backward_bias(p, o);
    }));
    const Tensor db = tensor(ConvDescriptors::bias_dims(c.x.size(), c.w[0]));
    const cudnnStatus_t status = [&] {
      switch (op) {
        case ooc::Operation::backward_data:
          return ooc_cudnnConvolutionBackwardData(kDummyHandle, &alpha, d.w.get(), w_nhwc.data(), d.y.get(),
                                                  dy_nhwc.data(), d.conv.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                                  nullptr, 0, &beta, d.x.get(), out.data());
        case ooc::Operation::backward_filter:
          return ooc_cudnnConvolutionBackwardFilter(kDummyHandle, &alpha, d.x.get(), x_nhwc.data(), d.y.get(),
                                                    dy_nhwc.data(), d.conv.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                    nullptr, 0, &beta, d.w.get(), out.data());
        default:
          return ooc_cudnnConvolutionBackwardBias(kDummyHandle, &alpha, d.y.get(), dy_nhwc.data(), &beta, db.get(),
                                                  out.data());
      }
    }();
    ASSERT_EQ(status, CUDNN_STATUS_SUCCESS) << last_error();
    const std::vector<double> ref = reference_gradient(p, x, w, dy, old);
    expect_close(out, op == ooc::Operation::backward_bias ? ref : nhwc(ref, out_dims), op_label(op));
    expect_split_run(op_label(op));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CapiChannelsLast,
                         ::testing::Values(NhwcCase{"conv2d", {3, 5, 11, 9}, {6, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                                           NhwcCase{"conv2d_groups_strided", {2, 6, 13, 10}, {8, 3, 3, 2}, {1, 0},
                                                    {2, 1}, {1, 2}, 2},
                                           NhwcCase{"conv3d", {2, 4, 6, 7, 5}, {5, 4, 3, 3, 2}, {1, 1, 0}, {1, 1, 1},
                                                    {1, 1, 1}, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

class CapiChannelsLastRefusals : public HostBackendTest {
 protected:
  const NhwcConv d{{2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}};
  const ConvDescriptors nchw{{2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}};
  std::vector<float> x = std::vector<float>(static_cast<size_t>(d.problem.x_elements()), 1.0f);
  std::vector<float> w = std::vector<float>(static_cast<size_t>(d.problem.w_elements()), 1.0f);
  std::vector<float> y = std::vector<float>(static_cast<size_t>(d.problem.y_elements()), 0.0f);
  std::vector<float> bias = std::vector<float>(4, 0.0f);
  float one = 1.0f, zero = 0.0f;

  cudnnStatus_t forward(cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd, cudnnTensorDescriptor_t yd) {
    return ooc_cudnnConvolutionForward(kDummyHandle, &one, xd, x.data(), wd, w.data(), d.conv.get(),
                                       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, yd, y.data());
  }
};

TEST_F(CapiChannelsLastRefusals, MixedLayoutsAreNotSupported) {
  EXPECT_EQ(forward(d.x.get(), nchw.w.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "wDesc")) << last_error();
  EXPECT_NE(last_error().find("mixes layouts"), std::string::npos) << last_error();
  EXPECT_EQ(forward(d.x.get(), d.w.get(), nchw.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  EXPECT_EQ(forward(d.x.get(), d.w.get(), d.y.get()), CUDNN_STATUS_SUCCESS) << last_error();
}

TEST_F(CapiChannelsLastRefusals, DegenerateDescriptorsFitEitherLayout) {
  // One input channel: NCHW and NHWC strides coincide, so an NCHW x goes with NHWC w and y.
  const NhwcConv one_channel{{2, 1, 9, 8}, {4, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}};
  const Tensor x_nchw = tensor({2, 1, 9, 8});
  EXPECT_EQ(ooc_cudnnConvolutionForward(kDummyHandle, &one, x_nchw.get(), x.data(), one_channel.w.get(), w.data(),
                                        one_channel.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                                        &zero, one_channel.y.get(), y.data()),
            CUDNN_STATUS_SUCCESS)
      << last_error();
}

TEST_F(CapiChannelsLastRefusals, FusedForwardAndLayersRefuseNhwc) {
  const Activation relu = activation(CUDNN_ACTIVATION_RELU);
  const Tensor b = tensor({1, 4, 1, 1});
  EXPECT_EQ(ooc_cudnnConvolutionBiasActivationForward(kDummyHandle, &one, d.x.get(), x.data(), d.w.get(), w.data(),
                                                      d.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                                                      0, &zero, d.y.get(), y.data(), b.get(), bias.data(), relu.get(),
                                                      d.y.get(), y.data()),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(ooc_cudnnActivationForward(kDummyHandle, relu.get(), &one, d.x.get(), x.data(), &zero, d.x.get(), x.data()),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "xDesc")) << last_error();
  EXPECT_NE(last_error().find("NCHW"), std::string::npos) << last_error();
}

}  // namespace
