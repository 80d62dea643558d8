// The C API (ooc_cudnn.h) without a GPU: argument checking and status codes for every entry point,
// and the out-of-core path's numerics through the host backend (capi::testing::use_host_backend),
// which never touches the handle, so a dummy one stands in for cudnnCreate's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "capi/capi_internal.hpp"
#include "capi_fixtures.hpp"
#include "backward_run.hpp"

namespace {

using namespace ooc_test;

const cudnnHandle_t kDummyHandle = dummy_handle();

class Capi : public HostBackendTest {
 protected:
  // A small valid convolution and buffers for it (contents irrelevant to argument checks).
  ConvDescriptors d{{2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}};
  std::vector<float> x = std::vector<float>(static_cast<size_t>(d.problem.x_elements()), 1.0f);
  std::vector<float> w = std::vector<float>(static_cast<size_t>(d.problem.w_elements()), 1.0f);
  std::vector<float> y = std::vector<float>(static_cast<size_t>(d.problem.y_elements()), 0.0f);
  std::vector<float> bias = std::vector<float>(static_cast<size_t>(d.problem.k), 0.0f);
  float one = 1.0f, zero = 0.0f;
  Activation relu = activation(CUDNN_ACTIVATION_RELU);

  cudnnStatus_t forward(cudnnHandle_t h, cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                        cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd) {
    return ooc_cudnnConvolutionForward(h, &one, xd, x.data(), wd, w.data(), cd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                       nullptr, 0, &zero, yd, y.data());
  }
  cudnnStatus_t forward() { return forward(kDummyHandle, d.x.get(), d.w.get(), d.conv.get(), d.y.get()); }

  // The gradients on the fixture's tensors, given the argument each test varies.
  cudnnStatus_t backward_data(const void* dy, cudnnTensorDescriptor_t dxd) {
    return ooc_cudnnConvolutionBackwardData(kDummyHandle, &one, d.w.get(), w.data(), d.y.get(), dy, d.conv.get(),
                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0, &zero, dxd, x.data());
  }
  cudnnStatus_t backward_filter(cudnnFilterDescriptor_t dwd, void* dw) {
    return ooc_cudnnConvolutionBackwardFilter(kDummyHandle, &one, d.x.get(), x.data(), d.y.get(), y.data(),
                                              d.conv.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, &zero, dwd,
                                              dw);
  }
  cudnnStatus_t backward_bias(const void* beta, cudnnTensorDescriptor_t dbd) {
    return ooc_cudnnConvolutionBackwardBias(kDummyHandle, &one, d.y.get(), y.data(), beta, dbd, bias.data());
  }
};

TEST_F(Capi, NullHandleIsBadParamForEveryEntryPoint) {
  EXPECT_EQ(ooc_cudnnConvolutionForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, nullptr, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ooc_cudnnConvolutionBiasActivationForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, nullptr,
                                                      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ooc_cudnnConvolutionBackwardData(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0, nullptr, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ooc_cudnnConvolutionBackwardFilter(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, nullptr, nullptr,
                                               nullptr),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ooc_cudnnConvolutionBackwardBias(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  // Also with everything else valid: the handle is checked, not assumed.
  EXPECT_EQ(forward(nullptr, d.x.get(), d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(last_error().find("handle"), std::string::npos) << last_error();
}

TEST_F(Capi, ValidCallSucceedsAndClearsTheLastError) {
  ASSERT_EQ(forward(nullptr, d.x.get(), d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM);
  ASSERT_EQ(forward(), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(oocGetLastErrorString(nullptr, 0), 0u);
}

// cudnnSetConvolutionGroupCount is honoured: a depthwise convolution with two filters per
// channel (groups 3) through the C API gives what ooc::conv_forward gives for that problem (whose
// own tests compare it with a float64 reference).
TEST_F(Capi, GroupCountIsHonoured) {
  const ConvDescriptors g({2, 3, 9, 8}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3);
  std::mt19937 rng(17);
  const std::vector<float> xs = random_vector(static_cast<size_t>(g.problem.x_elements()), rng);
  const std::vector<float> ws = random_vector(static_cast<size_t>(g.problem.w_elements()), rng);
  std::vector<float> ys(static_cast<size_t>(g.problem.y_elements()), std::nanf(""));
  std::vector<float> expected = ys;
  ooc::conv_forward(g.problem, xs.data(), ws.data(), nullptr, expected.data(), host_options(0));
  ASSERT_EQ(ooc_cudnnConvolutionForward(kDummyHandle, &one, g.x.get(), xs.data(), g.w.get(), ws.data(), g.conv.get(),
                                        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, g.y.get(),
                                        ys.data()),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  EXPECT_EQ(ys, expected);
}

// oocSetDevices spreads the out-of-core path over (here virtual host) devices: the same forward
// output bit for bit, the same dw within float32 rounding, under a budget that splits both.
TEST_F(Capi, DevicesSpreadTheCallAndGiveTheSameResults) {
  std::mt19937 rng(23);
  x = random_vector(x.size(), rng);
  w = random_vector(w.size(), rng);
  const size_t limit = oocGetMemoryLimit();
  oocSetMemoryLimit(2 * needed_bytes(d.problem, ooc::BackendKind::host));
  ASSERT_EQ(forward(), CUDNN_STATUS_SUCCESS) << last_error();
  const std::vector<float> y_one = y;
  std::vector<float> dw_one(w.size());
  ASSERT_EQ(backward_filter(d.w.get(), dw_one.data()), CUDNN_STATUS_SUCCESS) << last_error();
  const int devices[] = {0, 1, 1};
  ASSERT_EQ(oocSetDevices(devices, 3), CUDNN_STATUS_SUCCESS);
  int listed[4] = {};
  EXPECT_EQ(oocGetDevices(listed, 4), 3);
  EXPECT_EQ(listed[2], 1);
  std::fill(y.begin(), y.end(), std::nanf(""));
  const cudnnStatus_t spread_forward = forward();
  std::vector<float> dw_spread(w.size(), std::nanf(""));
  const cudnnStatus_t spread_filter = backward_filter(d.w.get(), dw_spread.data());
  EXPECT_EQ(oocSetDevices(nullptr, 0), CUDNN_STATUS_SUCCESS);
  oocSetMemoryLimit(limit);
  ASSERT_EQ(spread_forward, CUDNN_STATUS_SUCCESS) << last_error();
  ASSERT_EQ(spread_filter, CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(y, y_one);
  const Comparison c = compare(dw_spread, std::vector<double>(dw_one.begin(), dw_one.end()));
  EXPECT_EQ(c.non_finite, 0);
  EXPECT_LT(c.relative_error, 1e-6);
  EXPECT_EQ(oocSetDevices(devices, -1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(oocSetDevices(nullptr, 2), CUDNN_STATUS_BAD_PARAM);
  const int negative[] = {0, -3};
  EXPECT_EQ(oocSetDevices(negative, 2), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(oocGetDevices(listed, 4), 0);
}

// CUDNN_DATA_HALF and CUDNN_DATA_BFLOAT16 descriptors: the same results as ooc::conv_forward and
// its gradients of that dtype (whose own tests compare them with float64 references).
TEST_F(Capi, HalfPrecisionDescriptorsAreServed) {
  for (auto [type, dtype] : {std::pair{CUDNN_DATA_HALF, ooc::DType::float16},
                             std::pair{CUDNN_DATA_BFLOAT16, ooc::DType::bfloat16}}) {
    const Tensor xh = tensor({2, 3, 9, 8}, type), yh = tensor({2, 4, 9, 8}, type);
    const Filter wh = filter({4, 3, 3, 3}, type);
    const ooc::ConvProblem p =
        ooc::ConvProblem::forward({2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}, {1}, 1, 1.0, 0.0, false, dtype);
    std::mt19937 rng(29);
    std::vector<uint16_t> xs(p.x_elements()), ws(p.w_elements()), ys(p.y_elements(), 0xffff);
    for (uint16_t& v : xs) v = static_cast<uint16_t>(0x3c00 + rng() % 512);  // values of either type near 1
    for (uint16_t& v : ws) v = static_cast<uint16_t>(0x3800 + rng() % 512);
    std::vector<uint16_t> expected = ys;
    ooc::conv_forward(p, xs.data(), ws.data(), nullptr, expected.data(), host_options(0));
    ASSERT_EQ(ooc_cudnnConvolutionForward(kDummyHandle, &one, xh.get(), xs.data(), wh.get(), ws.data(), d.conv.get(),
                                          CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, yh.get(),
                                          ys.data()),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    EXPECT_EQ(ys, expected);
    std::vector<uint16_t> dw(p.w_elements(), 0xffff), dw_expected = dw;
    const ooc::ConvProblem f = ooc::ConvProblem::backward_filter({2, 3, 9, 8}, {2, 4, 9, 8}, {4, 3, 3, 3}, {1}, {1},
                                                                 {1}, 1, 1.0, 0.0, dtype);
    ooc::conv_backward_filter(f, xs.data(), ys.data(), dw_expected.data(), host_options(0));
    ASSERT_EQ(ooc_cudnnConvolutionBackwardFilter(kDummyHandle, &one, xh.get(), xs.data(), yh.get(), ys.data(),
                                                 d.conv.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, &zero,
                                                 wh.get(), dw.data()),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    EXPECT_EQ(dw, dw_expected);
  }
}

TEST_F(Capi, NullDescriptorsAreBadParam) {
  EXPECT_EQ(forward(kDummyHandle, nullptr, d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "xDesc")) << last_error();
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), nullptr, d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "wDesc")) << last_error();
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), nullptr, d.y.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "convDesc")) << last_error();
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), d.conv.get(), nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
}

TEST_F(Capi, UnsetDescriptorsAreBadParam) {
  const Tensor t = unset_tensor();
  const Filter f = unset_filter();
  const Convolution c = unset_convolution();
  EXPECT_EQ(forward(kDummyHandle, t.get(), d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), f.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), c.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), d.conv.get(), t.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
}

TEST_F(Capi, MismatchedShapesAreBadParam) {
  const Tensor wrong_y = tensor({2, 4, 9, 7});
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), d.conv.get(), wrong_y.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "yDesc")) << last_error();
  const Filter wrong_channels = filter({4, 2, 3, 3});
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), wrong_channels.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM)
      << last_error();
  const Filter w5 = filter({4, 3, 3, 3, 3});
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), w5.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  const Convolution conv3 = convolution({1, 1, 1}, {1, 1, 1}, {1, 1, 1});
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), conv3.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  const Filter too_big = filter({4, 3, 12, 3});  // kernel larger than the padded input
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), too_big.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM)
      << last_error();
}

TEST_F(Capi, UnsupportedTypesLayoutsAndModesAreNotSupported) {
  const Tensor x_double = tensor({2, 3, 9, 8}, CUDNN_DATA_DOUBLE);
  EXPECT_EQ(forward(kDummyHandle, x_double.get(), d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  const Filter w_half = filter({4, 3, 3, 3}, CUDNN_DATA_HALF);  // with float x and y: mixed
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), w_half.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "wDesc")) << last_error();
  const Filter w_nhwc = filter({4, 3, 3, 3}, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC);
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), w_nhwc.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  Tensor x_nhwc = unset_tensor();
  ASSERT_EQ(cudnnSetTensor4dDescriptor(x_nhwc.get(), CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 2, 3, 9, 8),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(forward(kDummyHandle, x_nhwc.get(), d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "xDesc")) << last_error();
  const Tensor x_padded_rows = tensor({2, 3, 9, 8}, CUDNN_DATA_FLOAT, {3 * 9 * 10, 9 * 10, 10, 1});
  EXPECT_EQ(forward(kDummyHandle, x_padded_rows.get(), d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  const Convolution flipped = convolution({1, 1}, {1, 1}, {1, 1}, CUDNN_CONVOLUTION);
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), flipped.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  const Convolution double_compute = convolution({1, 1}, {1, 1}, {1, 1}, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE);
  EXPECT_EQ(forward(kDummyHandle, d.x.get(), d.w.get(), double_compute.get(), d.y.get()), CUDNN_STATUS_NOT_SUPPORTED);
  // 4-D convolution (6-D tensors): cuDNN describes it, pyooc does not serve it.
  const Tensor x6 = tensor({1, 1, 3, 3, 3, 3});
  const Filter w6 = filter({1, 1, 1, 1, 1, 1});
  const Convolution conv4 = convolution({0, 0, 0, 0}, {1, 1, 1, 1}, {1, 1, 1, 1});
  EXPECT_EQ(forward(kDummyHandle, x6.get(), w6.get(), conv4.get(), x6.get()), CUDNN_STATUS_NOT_SUPPORTED);
}

TEST_F(Capi, SizeOneDimsMayHaveAnyStride) {
  // torch gives a [n, c, 1, w] tensor an arbitrary stride for the size-1 dim; it is still packed.
  ConvDescriptors flat{{2, 3, 1, 8}, {4, 3, 1, 3}, {0, 1}, {1, 1}, {1, 1}};
  const Tensor x_odd = tensor({2, 3, 1, 8}, CUDNN_DATA_FLOAT, {24, 8, 77, 1});
  std::vector<float> xf(48, 1.0f), wf(36, 1.0f), yf(static_cast<size_t>(flat.problem.y_elements()));
  EXPECT_EQ(ooc_cudnnConvolutionForward(kDummyHandle, &one, x_odd.get(), xf.data(), flat.w.get(), wf.data(),
                                        flat.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                        flat.y.get(), yf.data()),
            CUDNN_STATUS_SUCCESS)
      << last_error();
}

TEST_F(Capi, NullDataPointersAreBadParam) {
  const cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  auto fwd = [&](const void* a, const void* xp, const void* wp, const void* b, void* yp) {
    return ooc_cudnnConvolutionForward(kDummyHandle, a, d.x.get(), xp, d.w.get(), wp, d.conv.get(), algo, nullptr, 0, b,
                                       d.y.get(), yp);
  };
  EXPECT_EQ(fwd(nullptr, x.data(), w.data(), &zero, y.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "alpha")) << last_error();
  EXPECT_EQ(fwd(&one, nullptr, w.data(), &zero, y.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "x")) << last_error();
  EXPECT_EQ(fwd(&one, x.data(), nullptr, &zero, y.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(fwd(&one, x.data(), w.data(), nullptr, y.data()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(fwd(&one, x.data(), w.data(), &zero, nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "y")) << last_error();

  EXPECT_EQ(backward_data(nullptr, d.x.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dy")) << last_error();
  EXPECT_EQ(backward_filter(d.w.get(), nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dw")) << last_error();
  EXPECT_EQ(backward_bias(nullptr, d.bias.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "beta")) << last_error();
  EXPECT_EQ(ooc_cudnnConvolutionBiasActivationForward(kDummyHandle, &one, d.x.get(), x.data(), d.w.get(), w.data(),
                                                      d.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                      nullptr, 0, &zero, d.y.get(), y.data(), d.bias.get(), nullptr,
                                                      relu.get(), d.y.get(), y.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "bias")) << last_error();
}

TEST_F(Capi, BiasActivationChecksItsExtraArguments) {
  auto call = [&](cudnnTensorDescriptor_t zd, cudnnTensorDescriptor_t bd, cudnnActivationDescriptor_t ad) {
    return ooc_cudnnConvolutionBiasActivationForward(kDummyHandle, &one, d.x.get(), x.data(), d.w.get(), w.data(),
                                                     d.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                     nullptr, 0, &zero, zd, y.data(), bd, bias.data(), ad, d.y.get(),
                                                     y.data());
  };
  EXPECT_EQ(call(d.y.get(), d.bias.get(), relu.get()), CUDNN_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(call(d.y.get(), d.bias.get(), nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "activationDesc")) << last_error();
  const Activation sigmoid = activation(CUDNN_ACTIVATION_SIGMOID);
  EXPECT_EQ(call(d.y.get(), d.bias.get(), sigmoid.get()), CUDNN_STATUS_NOT_SUPPORTED);
  const Tensor wrong_bias = tensor({1, 5, 1, 1});
  EXPECT_EQ(call(d.y.get(), wrong_bias.get(), relu.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "biasDesc")) << last_error();
  const Tensor wrong_z = tensor({2, 4, 9, 7});
  EXPECT_EQ(call(wrong_z.get(), d.bias.get(), relu.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "zDesc")) << last_error();
}

TEST_F(Capi, BackwardShapesAreChecked) {
  const Tensor wrong_dx = tensor({2, 3, 9, 9});
  EXPECT_EQ(backward_data(y.data(), wrong_dx.get()), CUDNN_STATUS_BAD_PARAM) << last_error();
  const Filter wrong_dw = filter({4, 3, 5, 5});
  EXPECT_EQ(backward_filter(wrong_dw.get(), w.data()), CUDNN_STATUS_BAD_PARAM) << last_error();
  const Tensor wrong_db = tensor({1, 3, 1, 1});
  EXPECT_EQ(backward_bias(&zero, wrong_db.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_TRUE(names_argument(last_error(), "dbDesc")) << last_error();
}

TEST_F(Capi, ImpossibleBudgetIsAllocFailed) {
  oocSetMemoryLimit(1);
  EXPECT_EQ(oocGetMemoryLimit(), 1u);
  EXPECT_EQ(forward(), CUDNN_STATUS_ALLOC_FAILED);
  EXPECT_NE(last_error(), "");
}

TEST_F(Capi, WithoutAGpuTheCudaPathFailsCleanlyWithoutTouchingTheHandle) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  ooc::capi::testing::use_host_backend(false);
  EXPECT_EQ(forward(), CUDNN_STATUS_EXECUTION_FAILED);
  EXPECT_NE(last_error().find("CUDA device"), std::string::npos) << last_error();
}

// --- numerics of the out-of-core path, through the host backend ---

std::vector<float> random_floats(size_t n, std::mt19937& rng) { return random_vector(n, rng); }

// A budget twice the smallest plan's: small enough to split these shapes.
size_t conv_split_budget(const ooc::ConvProblem& p) {
  const ooc::BackendKind host = ooc::BackendKind::host;
  return 2 * (p.op == ooc::Operation::forward ? needed_bytes(p, host) : backward_needed_bytes(p, host));
}

struct HostCase {
  const char* name;
  Shape x, w, padding, stride, dilation;
};

class CapiHostNumerics : public Capi, public ::testing::WithParamInterface<HostCase> {
 protected:
  const HostCase& hc = GetParam();
  const ConvDescriptors cd{hc.x, hc.w, hc.padding, hc.stride, hc.dilation};

  // The case's forward convolution with alpha, beta (alpha2 for the fused call) and bias; random
  // x, w, bias and y (y's old values, or z) for it; and a memory limit that splits it.
  struct ForwardRun {
    ooc::ConvProblem p;
    std::vector<float> x, w, bias, y;
  };
  ForwardRun split_forward(double alpha, double beta, bool has_bias, unsigned seed) {
    ForwardRun r{cd.problem, {}, {}, {}, {}};
    r.p.alpha = alpha;
    r.p.beta = beta;
    r.p.has_bias = has_bias;
    std::mt19937 rng(test_seed(seed));
    ConvInputs in = random_conv_inputs(r.p, rng);
    r.x = std::move(in.x), r.w = std::move(in.w), r.bias = std::move(in.bias);
    r.y = random_floats(static_cast<size_t>(r.p.y_elements()), rng);
    oocSetMemoryLimit(conv_split_budget(r.p));
    return r;
  }

  // cudnnConvolutionBackward{Data,Filter,Bias} (op) of the case's convolution with alpha and beta:
  // under a budget that splits it, the call must succeed, run split, and blend the float64
  // reference gradient of random x, w and dy into the old output by alpha and beta.
  void check_gradient(ooc::Operation op, float alpha, float beta, unsigned seed) {
    const ooc::ConvProblem p = backward_spec(op, hc.x, hc.w, hc.stride, hc.padding, hc.dilation, alpha, beta).problem();
    std::mt19937 rng(test_seed(seed));
    const ooc::ConvProblem& f = cd.problem;
    const auto xs = random_floats(static_cast<size_t>(f.x_elements()), rng);
    const auto ws = random_floats(static_cast<size_t>(f.w_elements()), rng);
    const auto dys = random_floats(static_cast<size_t>(f.y_elements()), rng);
    const auto old = random_floats(static_cast<size_t>(gradient_elements(p)), rng);
    std::vector<float> out = old;
    oocSetMemoryLimit(conv_split_budget(p));
    const cudnnStatus_t status = [&] {
      switch (op) {
        case ooc::Operation::backward_data:
          return ooc_cudnnConvolutionBackwardData(kDummyHandle, &alpha, cd.w.get(), ws.data(), cd.y.get(), dys.data(),
                                                  cd.conv.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, nullptr, 0, &beta,
                                                  cd.x.get(), out.data());
        case ooc::Operation::backward_filter:
          return ooc_cudnnConvolutionBackwardFilter(kDummyHandle, &alpha, cd.x.get(), xs.data(), cd.y.get(),
                                                    dys.data(), cd.conv.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                    nullptr, 0, &beta, cd.w.get(), out.data());
        default:
          return ooc_cudnnConvolutionBackwardBias(kDummyHandle, &alpha, cd.y.get(), dys.data(), &beta, cd.bias.get(),
                                                  out.data());
      }
    }();
    ASSERT_EQ(status, CUDNN_STATUS_SUCCESS) << last_error();
    const std::string gradient = std::string("backward ") + op_label(op);
    expect_close(out, reference_gradient(p, xs, ws, dys, old), gradient);
    expect_split_run(gradient);
  }
};

TEST_P(CapiHostNumerics, ForwardMatchesReference) {
  const ForwardRun r = split_forward(1.5, 0.5, false, 1);
  std::vector<float> ys = r.y;
  const float alpha = 1.5f, beta = 0.5f;
  ASSERT_EQ(ooc_cudnnConvolutionForward(kDummyHandle, &alpha, cd.x.get(), r.x.data(), cd.w.get(), r.w.data(),
                                        cd.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta,
                                        cd.y.get(), ys.data()),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  expect_close(ys, reference_conv(r.p, r.x, r.w, nullptr, &r.y), "y");
  expect_split_run("forward");
}

TEST_P(CapiHostNumerics, BiasActivationMatchesReference) {
  const ForwardRun r = split_forward(0.75, 0.5, true, 2);  // r.y is z
  const float alpha1 = 0.75f, alpha2 = 0.5f;
  for (const cudnnActivationMode_t mode : {CUDNN_ACTIVATION_RELU, CUDNN_ACTIVATION_IDENTITY}) {
    for (const bool z_is_y : {false, true}) {
      SCOPED_TRACE(std::string(mode == CUDNN_ACTIVATION_RELU ? "relu" : "identity") + (z_is_y ? ", z == y" : ", z != y"));
      const Activation act = activation(mode);
      std::vector<float> ys(r.y.size(), std::nanf(""));
      if (z_is_y) ys = r.y;
      ASSERT_EQ(ooc_cudnnConvolutionBiasActivationForward(
                    kDummyHandle, &alpha1, cd.x.get(), r.x.data(), cd.w.get(), r.w.data(), cd.conv.get(),
                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, nullptr, 0, &alpha2, cd.y.get(),
                    z_is_y ? ys.data() : r.y.data(), cd.bias.get(), r.bias.data(), act.get(), cd.y.get(), ys.data()),
                CUDNN_STATUS_SUCCESS)
          << last_error();
      std::vector<double> want = reference_conv(r.p, r.x, r.w, &r.bias, &r.y);
      if (mode == CUDNN_ACTIVATION_RELU)
        for (double& v : want) v = std::max(v, 0.0);
      expect_close(ys, want, "y");
      expect_split_run("bias activation");
    }
  }
}

TEST_P(CapiHostNumerics, BackwardDataMatchesReference) {
  check_gradient(ooc::Operation::backward_data, 1.25f, 0.5f, 3);
}

TEST_P(CapiHostNumerics, BackwardFilterMatchesReference) {
  check_gradient(ooc::Operation::backward_filter, 0.5f, 1.0f, 4);
}

TEST_P(CapiHostNumerics, BackwardBiasMatchesReference) {
  check_gradient(ooc::Operation::backward_bias, 2.0f, 0.25f, 5);
}

INSTANTIATE_TEST_SUITE_P(Cases, CapiHostNumerics,
                         ::testing::Values(HostCase{"conv2d_pad", {3, 5, 13, 11}, {6, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
                                           HostCase{"conv2d_stride_dilation", {2, 4, 17, 15}, {5, 4, 3, 2}, {2, 0},
                                                    {2, 1}, {2, 3}},
                                           HostCase{"conv3d", {2, 3, 7, 8, 9}, {4, 3, 3, 3, 3}, {1, 1, 1}, {1, 2, 1},
                                                    {1, 1, 1}}),
                         [](const ::testing::TestParamInfo<HostCase>& info) { return std::string(info.param.name); });

// --- last plan, last error, threads ---

TEST_F(Capi, LastPlanInfoAndDescription) {
  EXPECT_EQ(oocGetLastPlanInfo(nullptr), CUDNN_STATUS_BAD_PARAM);
  std::thread([] {  // a fresh thread has made no call
    oocPlanInfo_t info{};
    EXPECT_EQ(oocGetLastPlanInfo(&info), CUDNN_STATUS_NOT_INITIALIZED);
    EXPECT_EQ(oocGetLastPlanDescription(nullptr, 0), 0u);
    char buf[4] = "xyz";
    EXPECT_EQ(oocGetLastPlanDescription(buf, sizeof(buf)), 0u);
    EXPECT_STREQ(buf, "");
  }).join();
  ASSERT_EQ(forward(), CUDNN_STATUS_SUCCESS) << last_error();
  const std::string text = last_plan();
  ASSERT_GT(text.size(), 10u);
  char small[8];
  EXPECT_EQ(oocGetLastPlanDescription(small, sizeof(small)), text.size());
  EXPECT_EQ(std::string(small), text.substr(0, 7));  // truncated, NUL-terminated
  oocPlanInfo_t info{};
  ASSERT_EQ(oocGetLastPlanInfo(&info), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(info.outOfCore, 1);
  EXPECT_GE(info.chunks, 1);
  // A failed call leaves the last successful call's plan in place.
  EXPECT_EQ(forward(nullptr, d.x.get(), d.w.get(), d.conv.get(), d.y.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(last_plan(), text);
}

TEST_F(Capi, ThreadsWithDistinctHandlesKeepTheirOwnResultsAndPlans) {
  constexpr int kThreads = 4;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &failures] {
      ConvDescriptors cd({1 + t, 2, 6 + t, 7}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1});
      const ooc::ConvProblem& p = cd.problem;
      std::mt19937 rng(static_cast<unsigned>(100 + t));
      const auto xs = random_vector(static_cast<size_t>(p.x_elements()), rng);
      const auto ws = random_vector(static_cast<size_t>(p.w_elements()), rng);
      const float one = 1.0f, zero = 0.0f;
      int handle_storage = 0;  // distinct per thread
      for (int round = 0; round < 5; ++round) {
        std::vector<float> ys(static_cast<size_t>(p.y_elements()), std::nanf(""));
        const cudnnStatus_t s = ooc_cudnnConvolutionForward(
            reinterpret_cast<cudnnHandle_t>(&handle_storage), &one, cd.x.get(), xs.data(), cd.w.get(), ws.data(),
            cd.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, cd.y.get(), ys.data());
        if (s != CUDNN_STATUS_SUCCESS) {
          failures[t] = "status " + std::to_string(s) + ": " + last_error();
          return;
        }
        const Comparison c = compare(ys, reference_conv(p, xs, ws, nullptr, nullptr));
        if (c.non_finite || c.relative_error > 1e-5) failures[t] = "wrong result in round " + std::to_string(round);
        if (last_plan().find("x" + shape_str(p.x_shape())) == std::string::npos)
          failures[t] = "another thread's plan: " + last_plan();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

// --- memory ---

TEST(CapiMemory, ArgumentChecksNeedNoGpu) {
  EXPECT_EQ(ooc_cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(ooc_cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(ooc_cudaFree(nullptr), cudaSuccess);
  char a[8] = "abcdefg", b[8] = {};
  EXPECT_EQ(ooc_cudaMemcpy(b, a, 8, static_cast<cudaMemcpyKind>(7)), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(ooc_cudaMemcpy(b, a, 0, cudaMemcpyHostToHost), cudaSuccess);
  EXPECT_EQ(ooc_cudaMemcpy(nullptr, a, 8, cudaMemcpyHostToHost), cudaErrorInvalidValue);
  EXPECT_EQ(ooc_cudaMemset(nullptr, 0, 8), cudaErrorInvalidValue);
}

TEST(CapiMemory, MemsetOfPageableMemoryNeedsNoGpu) {
  std::vector<unsigned char> buf(100, 0);
  ASSERT_EQ(ooc_cudaMemset(buf.data(), 0xab, buf.size()), cudaSuccess);
  for (unsigned char v : buf) ASSERT_EQ(v, 0xab);
}

// Under the host-backend switch whole C API programs run without CUDA (the example's CPU test).
TEST_F(Capi, MemoryUnderTheHostBackendIsHostMemory) {
  void* p = nullptr;
  ASSERT_EQ(ooc_cudaMalloc(&p, 64), cudaSuccess) << last_error();
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(ooc_cudaMemset(p, 0x5a, 64), cudaSuccess);
  char back[64] = {};
  ASSERT_EQ(ooc_cudaMemcpy(back, p, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  for (char c : back) ASSERT_EQ(c, 0x5a);
  const char text[] = "host backend";
  ASSERT_EQ(ooc_cudaMemcpy(p, text, sizeof text, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_STREQ(static_cast<const char*>(p), text);
  EXPECT_EQ(ooc_cudaFree(p), cudaSuccess);
}

TEST(CapiMemory, WithoutAGpuMallocFailsWithACudaError) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  void* p = reinterpret_cast<void*>(1);
  const cudaError_t s = ooc_cudaMalloc(&p, 1024);
  EXPECT_NE(s, cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(last_error(), "");
}

}  // namespace
