// The gradients on the cuda backend: the host cases' numerics against the float64 references (FP32
// math, no TF32, so the fp32 tolerance holds), pinned caller memory (direct DMA through windows), a
// larger problem across many chunks, and fault injection in every gradient's compute call proving
// the error paths leave the library usable. Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backward_run.hpp"

namespace {

using ooc::BackendKind;
using ooc::Operation;
using ooc_test::BackwardCase;
using ooc_test::BackwardSpec;
using ooc_test::have_gpu;

TEST(CudaBackwardWithoutGpu, AskingForCudaIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  ooc::Options o;
  o.backend = BackendKind::cuda;
  const ooc::ConvProblem p = ooc_test::backward_spec(Operation::backward_filter, {1, 1, 8}, {1, 1, 3}).problem();
  EXPECT_THROW(ooc::plan_conv_backward_filter(p, o), ooc::invalid_argument);
}

class CudaBackward : public ooc_test::GpuTest<::testing::TestWithParam<BackwardCase>> {
 protected:
  size_t budget(const BackwardCase& bc) const { return ooc_test::case_budget(bc, BackendKind::cuda); }
};

TEST_P(CudaBackward, MatchesFloat64Reference) {
  const BackwardCase& bc = GetParam();
  const auto r = ooc_test::run_backward_and_check(
      bc.spec, budget(bc), BackendKind::cuda, ooc_test::case_seed(bc.name));
  EXPECT_EQ(r.plan.backend, "cuda");
  // The cuda backend reserves workspace and has its own cost model: where only one split is
  // possible (the "alone" cases) it must happen; elsewhere the problem must at least be split.
  if (bc.budget_factor == 0 || std::string(bc.name).find("alone") != std::string::npos) {
    EXPECT_TRUE(bc.expect(r.plan)) << r.plan.describe();
  } else {
    EXPECT_GT(r.plan.num_chunks(), 1u) << r.plan.describe();
  }
}

TEST_P(CudaBackward, PinnedCallerMemory) {
  const BackwardCase& bc = GetParam();
  const unsigned seed = ooc_test::case_seed(bc.name, 1);
  const auto r = ooc_test::run_backward_and_check(bc.spec, budget(bc), BackendKind::cuda, seed, 1e-5,
                                                  ooc_test::CallerMemory::pinned);
  if (bc.budget_factor > 0) {
    EXPECT_GT(r.plan.num_chunks(), 1u) << r.plan.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaBackward, ::testing::ValuesIn(ooc_test::backward_cases()),
                         [](const ::testing::TestParamInfo<BackwardCase>& info) { return std::string(info.param.name); });

class CudaBackwardOps : public ooc_test::GpuTest<::testing::TestWithParam<Operation>> {};

TEST_P(CudaBackwardOps, LargerProblemAcrossManyChunks) {
  // Big enough for the streams to overlap; a budget an eighth of the working set.
  const BackwardSpec spec =
      ooc_test::backward_spec(GetParam(), {8, 32, 64, 64}, {48, 32, 3, 3}, {1}, {1}, {1}, 1.0, 0.5);
  const ooc::ConvProblem f = spec.forward();
  const size_t whole = static_cast<size_t>(f.x_elements() + f.w_elements() + f.y_elements()) * 4;
  const auto r = ooc_test::run_backward_and_check(spec, whole / 8, BackendKind::cuda, ooc_test::test_seed(__LINE__));
  EXPECT_GT(r.plan.num_chunks(), 4u) << r.plan.describe();
}

// A fault in the countdown-th convolution call of a gradient surfaces as cudnn_error (copies:
// cuda_error), and the next call, on the same process-wide backend, runs and is right.
TEST_P(CudaBackwardOps, FaultInjection) {
  const BackwardSpec spec = ooc_test::backward_spec(GetParam(), {4, 8, 24, 24}, {6, 8, 3, 3}, {1}, {1});
  const ooc::ConvProblem p = spec.problem();
  ooc::Options o;
  o.backend = BackendKind::cuda;
  o.memory_limit = 2 * ooc_test::backward_needed_bytes(p, BackendKind::cuda);
  ASSERT_GE(ooc_test::plan_backward(p, o).num_chunks(), 3u);
  const ooc::ConvProblem f = spec.forward();
  std::mt19937 rng(ooc_test::test_seed(__LINE__));
  const auto x = ooc_test::random_vector(static_cast<size_t>(f.x_elements()), rng);
  const auto w = ooc_test::random_vector(static_cast<size_t>(f.w_elements()), rng);
  const auto dy = ooc_test::random_vector(static_cast<size_t>(f.y_elements()), rng);
  std::vector<float> out(static_cast<size_t>(std::max(f.x_elements(), f.w_elements())), NAN);
  auto call = [&] {
    switch (p.op) {
      case Operation::backward_data: ooc::conv_backward_data(p, dy.data(), w.data(), out.data(), o); break;
      case Operation::backward_filter: ooc::conv_backward_filter(p, x.data(), dy.data(), out.data(), o); break;
      default: ooc::conv_backward_bias(p, dy.data(), out.data(), o); break;
    }
  };
  for (int64_t countdown : {1, 3}) {
    SCOPED_TRACE("countdown " + std::to_string(countdown));
    ooc::testing::inject_fault("conv", countdown);
    EXPECT_THROW(call(), ooc::cudnn_error);
    ooc::testing::inject_fault("copy", countdown);
    EXPECT_THROW(call(), ooc::cuda_error);
    ooc_test::run_backward_and_check(spec, o.memory_limit, BackendKind::cuda, ooc_test::test_seed(__LINE__));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaBackwardOps,
                         ::testing::Values(Operation::backward_data, Operation::backward_filter,
                                           Operation::backward_bias),
                         [](const ::testing::TestParamInfo<Operation>& info) {
                           return std::string(ooc_test::op_label(info.param));
                         });

}  // namespace
