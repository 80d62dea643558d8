// cudnnSetConvolutionMathType through the C API, without a GPU: the out-of-core path reads the
// descriptor's math type as cuDNN does (FMA: full FP32; DEFAULT, a fresh descriptor's, and the
// tensor-op types: TF32 allowed), the plan that ran records it, the call leaves the descriptor's
// type as it was, and the host backend's result is the library's full-FP32 one in every mode.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "capi/capi_internal.hpp"
#include "capi_fixtures.hpp"

namespace {

using namespace ooc_test;

const cudnnHandle_t kDummyHandle = dummy_handle();
const std::vector<int64_t> kOnes{1, 1};  // the fixture's padding, stride and dilation

constexpr cudnnMathType_t kTf32Types[] = {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH,
                                          CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION};

TEST(CapiMathType, EachMathTypeMapsAsCudnnReadsIt) {
  Convolution fresh = unset_convolution();
  cudnnMathType_t math = CUDNN_FMA_MATH;
  ASSERT_EQ(cudnnGetConvolutionMathType(fresh.get(), &math), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(math, CUDNN_DEFAULT_MATH);  // what the C API mirrors: a fresh descriptor allows TF32
  EXPECT_EQ(ooc::capi::conv_math_mode(fresh.get()), ooc::MathMode::tf32);
  for (cudnnMathType_t type : kTf32Types) {
    ASSERT_EQ(cudnnSetConvolutionMathType(fresh.get(), type), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(ooc::capi::conv_math_mode(fresh.get()), ooc::MathMode::tf32) << type;
  }
  ASSERT_EQ(cudnnSetConvolutionMathType(fresh.get(), CUDNN_FMA_MATH), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(ooc::capi::conv_math_mode(fresh.get()), ooc::MathMode::fp32);
  EXPECT_THROW(ooc::capi::conv_math_mode(nullptr), ooc::invalid_argument);
}

class CapiMathTypeRun : public HostBackendTest {
 protected:
  ConvDescriptors d{{2, 5, 13, 11}, {6, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}};
  std::mt19937 rng{23};
  std::vector<float> x = random_vector(static_cast<size_t>(d.problem.x_elements()), rng);
  std::vector<float> w = random_vector(static_cast<size_t>(d.problem.w_elements()), rng);
  std::vector<float> dy = random_vector(static_cast<size_t>(d.problem.y_elements()), rng);
  float one = 1.0f, zero = 0.0f;

  // Forward, backward data and backward filter through the C API with convDesc's math type as
  // set, under a budget that splits them; each result against the library's own fp32 call, the
  // plan that ran against `tf32`.
  void run_all(bool tf32) {
    const ooc::Options library = host_options(4 << 10);
    oocSetMemoryLimit(4 << 10);
    const ooc::ConvProblem& p = d.problem;
    expect_library_result("forward", dy.size(), tf32, [&](float* y) {
      return ooc_cudnnConvolutionForward(kDummyHandle, &one, d.x.get(), x.data(), d.w.get(), w.data(), d.conv.get(),
                                         CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d.y.get(), y);
    }, [&](float* y) { ooc::conv_forward(p, x.data(), w.data(), nullptr, y, library); });
    expect_library_result("backward data", x.size(), tf32, [&](float* dx) {
      return ooc_cudnnConvolutionBackwardData(kDummyHandle, &one, d.w.get(), w.data(), d.y.get(), dy.data(),
                                              d.conv.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0, &zero,
                                              d.x.get(), dx);
    }, [&](float* dx) {
      ooc::conv_backward_data(ooc::ConvProblem::backward_data(p.y_shape(), p.w_shape(), p.x_shape(), kOnes, kOnes,
                                                              kOnes, 1, 1.0, 0.0),
                              dy.data(), w.data(), dx, library);
    });
    expect_library_result("backward filter", w.size(), tf32, [&](float* dw) {
      return ooc_cudnnConvolutionBackwardFilter(kDummyHandle, &one, d.x.get(), x.data(), d.y.get(), dy.data(),
                                                d.conv.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, &zero,
                                                d.w.get(), dw);
    }, [&](float* dw) {
      ooc::conv_backward_filter(ooc::ConvProblem::backward_filter(p.x_shape(), p.y_shape(), p.w_shape(), kOnes,
                                                                  kOnes, kOnes, 1, 1.0, 0.0),
                                x.data(), dy.data(), dw, library);
    });
  }

  // One call's output (NaN-poisoned) through the C API against the library's into the same.
  template <typename CapiCall, typename LibraryCall>
  static void expect_library_result(const char* what, size_t elements, bool tf32, CapiCall capi, LibraryCall call) {
    std::vector<float> got(elements, std::numeric_limits<float>::quiet_NaN()), want = got;
    ASSERT_EQ(capi(got.data()), CUDNN_STATUS_SUCCESS) << what << ": " << last_error();
    expect_plan_math(tf32, what);
    call(want.data());
    EXPECT_EQ(got, want) << what;
  }

  static void expect_plan_math(bool tf32, const char* what) {
    expect_split_run(what);
    EXPECT_EQ(last_plan().find("math tf32") != std::string::npos, tf32) << what << "\n" << last_plan();
  }
};

TEST_F(CapiMathTypeRun, TensorOpMathRunsTf32PlansWithTheLibrarysHostResults) {
  for (cudnnMathType_t type : kTf32Types) {
    SCOPED_TRACE("math type " + std::to_string(type));
    ASSERT_EQ(cudnnSetConvolutionMathType(d.conv.get(), type), CUDNN_STATUS_SUCCESS);
    run_all(true);
    cudnnMathType_t after = CUDNN_FMA_MATH;
    ASSERT_EQ(cudnnGetConvolutionMathType(d.conv.get(), &after), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(after, type);  // the calls read the descriptor, never change it
  }
}

TEST_F(CapiMathTypeRun, FmaMathRunsFullFp32Plans) {
  ASSERT_EQ(cudnnSetConvolutionMathType(d.conv.get(), CUDNN_FMA_MATH), CUDNN_STATUS_SUCCESS);
  run_all(false);
}

}  // namespace
