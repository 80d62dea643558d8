// The C API's math types on a GPU, out of core (pageable host memory): a convolution descriptor
// left at cuDNN's CUDNN_DEFAULT_MATH runs TF32 chunks (within 5e-3 of float64) as cuDNN itself
// would, CUDNN_FMA_MATH full-FP32 ones (1e-5); ooc_cublasSgemm under CUBLAS_TF32_TENSOR_OP_MATH
// runs TF32, under cuBLAS' default full FP32. Skips without a GPU.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend_fixtures.hpp"
#include "capi_fixtures.hpp"
#include "capi_gpu_fixtures.hpp"
#include "ooc/ooc_cublas.h"

namespace {

using namespace ooc_test;

class CapiMathTypeGpu : public CublasGpuTest {
 protected:
  void SetUp() override {
    CublasGpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudnnCreate(&cudnn_), CUDNN_STATUS_SUCCESS);
  }
  void TearDown() override {
    CublasGpuTest::TearDown();
    if (cudnn_) EXPECT_EQ(cudnnDestroy(cudnn_), CUDNN_STATUS_SUCCESS);
  }

  // Both results against the reference: full FP32 within 1e-5, TF32 within 5e-3, each plan saying
  // which mode it ran. tf32_must_differ: cuBLAS's TF32 GEMM always differs from full FP32; cuDNN's
  // legacy convolutions may not (Find timed FMA kernels fastest with TF32 permitted, on the H200
  // for the convolution below, run of 288343f).
  static void expect_modes(const std::vector<float> (&got)[2], const std::vector<double>& ref,
                           const std::string (&plans)[2], bool tf32_must_differ) {
    EXPECT_LT(compare(got[0], ref).relative_error, 1e-5) << plans[0];
    EXPECT_LT(compare(got[1], ref).relative_error, 5e-3) << plans[1];
    if (tf32_must_differ) EXPECT_NE(got[0], got[1]) << "TF32 allowed, yet only full-FP32 kernels ran";
    EXPECT_EQ(plans[0].find("math tf32"), std::string::npos) << plans[0];
    EXPECT_NE(plans[1].find("math tf32"), std::string::npos) << plans[1];
  }

  cudnnHandle_t cudnn_ = nullptr;
  std::mt19937 rng{41};
  float one = 1.0f, zero = 0.0f;
};

TEST_F(CapiMathTypeGpu, ConvolutionFollowsTheDescriptorsMathType) {
  ConvDescriptors d({4, 64, 32, 32}, {64, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1});
  const std::vector<float> x = random_vector(static_cast<size_t>(d.problem.x_elements()), rng);
  const std::vector<float> w = random_vector(static_cast<size_t>(d.problem.w_elements()), rng);
  const std::vector<double> ref = reference_conv(d.problem, x, w, nullptr, nullptr);
  oocSetMemoryLimit(size_t{4} << 20);  // pageable memory under a budget: out of core, in chunks
  std::vector<float> y[2];
  std::string plans[2];
  const cudnnMathType_t types[2] = {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH};
  for (int m = 0; m < 2; ++m) {
    ASSERT_EQ(cudnnSetConvolutionMathType(d.conv.get(), types[m]), CUDNN_STATUS_SUCCESS);
    y[m].assign(ref.size(), std::numeric_limits<float>::quiet_NaN());
    ASSERT_EQ(ooc_cudnnConvolutionForward(cudnn_, &one, d.x.get(), x.data(), d.w.get(), w.data(), d.conv.get(),
                                          CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d.y.get(),
                                          y[m].data()),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    plans[m] = last_plan();
  }
  expect_modes(y, ref, plans, false);
}

TEST_F(CapiMathTypeGpu, SgemmFollowsTheHandlesMathMode) {
  constexpr int m = 256, k = 512, n = 192;  // column-major, as cuBLAS: C[m, n] = A[m, k] B[k, n]
  const std::vector<float> a = random_vector(size_t{m} * k, rng), b = random_vector(size_t{k} * n, rng);
  std::vector<double> ref(size_t{m} * n, 0.0);
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < k; ++l)
      for (int i = 0; i < m; ++i)
        ref[size_t{j} * m + i] += double{a[size_t{l} * m + i]} * double{b[size_t{j} * k + l]};
  oocSetMemoryLimit(size_t{1} << 20);
  std::vector<float> c[2];
  std::string plans[2];
  const cublasMath_t modes[2] = {CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH};
  for (int mode = 0; mode < 2; ++mode) {
    ASSERT_EQ(cublasSetMathMode(cublas_, modes[mode]), CUBLAS_STATUS_SUCCESS);
    c[mode].assign(ref.size(), std::numeric_limits<float>::quiet_NaN());
    ASSERT_EQ(ooc_cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.data(), m, b.data(), k, &zero,
                              c[mode].data(), m),
              CUBLAS_STATUS_SUCCESS)
        << last_error();
    plans[mode] = last_plan();
  }
  expect_modes(c, ref, plans, true);
}

}  // namespace
