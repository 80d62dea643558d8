// Options::math: plans keep and record the call's mode, the host backend computes full FP32 in
// both, and on the GPU TF32 stays within its tolerance while the FP32 default keeps its own.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend_fixtures.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc.hpp"
#include "plan/plan_cache.hpp"
#include "test_util.hpp"

namespace {

using namespace ooc_test;

ooc::Options with_math(ooc::Options o, ooc::MathMode math) {
  o.math = math;
  return o;
}

// 64 channels in and out, 3x3: large enough that cuDNN's heuristics take tensor-core kernels when
// TF32 is allowed.
ooc::ConvProblem wide_conv() {
  return ooc::ConvProblem::forward({2, 64, 24, 24}, {64, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1.0, 0.0, false);
}

// c[m, n] = a[m, k] b[k, n] in double.
std::vector<double> reference_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                                     int64_t n) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l) {
      const double av = a[static_cast<size_t>(i * k + l)];
      for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(i * n + j)] += av * b[static_cast<size_t>(l * n + j)];
    }
  return c;
}

TEST(MathMode, PlansRecordTheModeAndAreKeptPerMode) {
  ooc::clear_plan_cache();
  const ooc::ConvProblem p = wide_conv();
  const ooc::Options host = host_options(size_t{4} << 20);
  const ooc::Plan fp32 = ooc::plan_conv_forward(p, host);
  const ooc::Plan tf32 = ooc::plan_conv_forward(p, with_math(host, ooc::MathMode::tf32));
  EXPECT_EQ(fp32.math, ooc::MathMode::fp32);  // the default
  EXPECT_EQ(tf32.math, ooc::MathMode::tf32);
  // Two entries: a tf32 call never reuses (and so runs with) the fp32 plan, nor the reverse.
  EXPECT_EQ(ooc::plan_cache_size(), 2u);
  const size_t hits = ooc::plan_cache_hits();
  EXPECT_EQ(ooc::plan_conv_forward(p, with_math(host, ooc::MathMode::tf32)).math, ooc::MathMode::tf32);
  EXPECT_EQ(ooc::plan_cache_hits(), hits + 1);
  EXPECT_NE(tf32.describe().find("math tf32"), std::string::npos) << tf32.describe();
  EXPECT_EQ(fp32.describe().find("math tf32"), std::string::npos) << fp32.describe();
  EXPECT_STREQ(ooc::math_mode_name(ooc::MathMode::fp32), "fp32");
  EXPECT_STREQ(ooc::math_mode_name(ooc::MathMode::tf32), "tf32");
}

// The host backend has no TF32: under a budget that splits them, tf32 calls give the fp32 calls'
// results bit for bit.
TEST(MathMode, HostBackendComputesFullFp32InBothModes) {
  const ooc::ConvProblem p =
      ooc::ConvProblem::forward({2, 6, 11, 9}, {5, 6, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1.0, 0.0, false);
  std::mt19937 rng(31);
  const auto [x, w, bias] = random_conv_inputs(p, rng);
  const ooc::Options host = host_options(4 << 10);
  std::vector<float> y[2];
  for (int m = 0; m < 2; ++m) {
    y[m].assign(static_cast<size_t>(p.y_elements()), std::numeric_limits<float>::quiet_NaN());
    ooc::Plan used;
    ooc::conv_forward(p, x.data(), w.data(), nullptr, y[m].data(), with_math(host, static_cast<ooc::MathMode>(m)),
                      &used);
    EXPECT_GT(used.num_chunks(), 1u) << used.describe();
    EXPECT_EQ(used.math, static_cast<ooc::MathMode>(m));
  }
  EXPECT_EQ(y[0], y[1]);
  EXPECT_LT(compare(y[0], reference_conv(p, x, w, nullptr, nullptr)).relative_error, 1e-5);

  const ooc::ConvProblem g = ooc::matmul_problem({37, 29}, {29, 23}, 1.0, 0.0, false);
  const std::vector<float> a = random_vector(37 * 29, rng), b = random_vector(29 * 23, rng);
  std::vector<float> c[2];
  for (int m = 0; m < 2; ++m) {
    c[m].assign(37 * 23, std::numeric_limits<float>::quiet_NaN());
    ooc::matmul(g, false, false, a.data(), b.data(), nullptr, c[m].data(),
                with_math(host_options(2 << 10), static_cast<ooc::MathMode>(m)));
  }
  EXPECT_EQ(c[0], c[1]);
}

class MathModeGpu : public GpuTest<> {};

// TF32 within 5e-3 of the float64 reference's norm, the FP32 default within 1e-5; and TF32 really
// ran (its result differs from FP32's), else the test would prove nothing about it.
TEST_F(MathModeGpu, ConvolutionTf32WithinItsToleranceFp32WithinItsOwn) {
  const ooc::ConvProblem p = wide_conv();
  std::mt19937 rng(7);
  const auto [x, w, bias] = random_conv_inputs(p, rng);
  const std::vector<double> ref = reference_conv(p, x, w, nullptr, nullptr);
  std::vector<float> y[2];
  for (int m = 0; m < 2; ++m) {
    y[m].assign(static_cast<size_t>(p.y_elements()), std::numeric_limits<float>::quiet_NaN());
    ooc::conv_forward(p, x.data(), w.data(), nullptr, y[m].data(),
                      with_math(options_for(ooc::BackendKind::cuda, size_t{2} << 20), static_cast<ooc::MathMode>(m)));
  }
  const Comparison fp32 = compare(y[0], ref), tf32 = compare(y[1], ref);
  EXPECT_EQ(fp32.non_finite, 0);
  EXPECT_EQ(tf32.non_finite, 0);
  EXPECT_LT(fp32.relative_error, 1e-5);
  EXPECT_LT(tf32.relative_error, 5e-3);
  // Not EXPECT_NE(y[0], y[1]): with TF32 permitted, cuDNN's legacy API may still time FMA kernels
  // fastest (it did on the H200 for this shape, run of 288343f); the plan records the mode.
}

TEST_F(MathModeGpu, MatmulTf32WithinItsToleranceFp32WithinItsOwn) {
  constexpr int64_t m = 256, k = 512, n = 192;
  const ooc::ConvProblem g = ooc::matmul_problem({m, k}, {k, n}, 1.0, 0.0, false);
  std::mt19937 rng(11);
  const std::vector<float> a = random_vector(m * k, rng), b = random_vector(k * n, rng);
  const std::vector<double> ref = reference_matmul(a, b, m, k, n);
  std::vector<float> c[2];
  for (int mode = 0; mode < 2; ++mode) {
    c[mode].assign(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
    ooc::matmul(g, false, false, a.data(), b.data(), nullptr, c[mode].data(),
                with_math(options_for(ooc::BackendKind::cuda, size_t{1} << 20), static_cast<ooc::MathMode>(mode)));
  }
  EXPECT_LT(compare(c[0], ref).relative_error, 1e-5);
  EXPECT_LT(compare(c[1], ref).relative_error, 5e-3);
  EXPECT_NE(c[0], c[1]) << "CUBLAS_TF32_TENSOR_OP_MATH was set, yet cuBLAS ran full FP32";
}

}  // namespace
