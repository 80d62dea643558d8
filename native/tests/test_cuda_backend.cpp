// The cuda backend: the same end-to-end numerics as the host pipeline (FP32 math, no TF32, so the
// fp32 tolerance holds), and fault injection proving error paths leave the library usable.
// GPU tests skip themselves when no CUDA device is present; the no-GPU behaviour is tested here too.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "conv_run.hpp"

namespace {

using ooc::BackendKind;
using ooc_test::ConvSpec;
using ooc_test::have_gpu;
using ooc_test::PipelineCase;

TEST(CudaWithoutGpu, AskingForCudaIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  const ooc::ConvProblem p = ConvSpec{{1, 1, 8}, {1, 1, 3}}.problem();
  ooc::Options o;
  o.backend = BackendKind::cuda;
  try {
    ooc::plan_conv_forward(p, o);
    ADD_FAILURE() << "planning for cuda without a GPU should throw";
  } catch (const ooc::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

class CudaPipeline : public ooc_test::GpuTest<::testing::TestWithParam<PipelineCase>> {};

TEST_P(CudaPipeline, MatchesFloat64Reference) {
  const PipelineCase& pc = GetParam();
  const ooc::ConvProblem p = pc.spec.problem();
  // The cuda backend's cost model and workspace pick other tiles than the host's, so uneven edges
  // are only asked of the host tests; the split kind is asked here too.
  const size_t budget = ooc_test::budget_for(p, BackendKind::cuda, pc.budget_factor, pc.expect);
  ASSERT_TRUE(budget > 0 || pc.budget_factor == 0) << "no budget makes the planner split as this case needs";
  const auto r = ooc_test::run_and_check(pc.spec, budget, BackendKind::cuda,
                                         ooc_test::case_seed(pc.name));
  EXPECT_EQ(r.plan.backend, "cuda");
  EXPECT_TRUE(pc.expect(r.plan)) << r.plan.describe();
}

// Pinned caller memory takes the direct path: strided DMA into device slots, halos zeroed on the
// device, y written in place by D2H.
TEST_P(CudaPipeline, PinnedCallerMemory) {
  const PipelineCase& pc = GetParam();
  const ooc::ConvProblem p = pc.spec.problem();
  const size_t budget = ooc_test::budget_for(p, BackendKind::cuda, pc.budget_factor, pc.expect);
  ASSERT_TRUE(budget > 0 || pc.budget_factor == 0) << "no budget makes the planner split as this case needs";
  const unsigned seed = ooc_test::case_seed(pc.name, 1);
  const auto r = ooc_test::run_and_check(pc.spec, budget, BackendKind::cuda, seed, 1e-5, ooc_test::CallerMemory::pinned);
  EXPECT_TRUE(pc.expect(r.plan)) << r.plan.describe();
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaPipeline, ::testing::ValuesIn(ooc_test::pipeline_cases()),
                         [](const ::testing::TestParamInfo<PipelineCase>& info) { return std::string(info.param.name); });

class CudaBackend : public ooc_test::GpuTest<> {};

TEST_F(CudaBackend, LargerProblemAcrossManyChunks) {
  // Big enough for the streams to overlap; split by a budget an eighth of what it would need whole.
  const ConvSpec spec{{4, 32, 64, 64}, {48, 32, 3, 3}, {1}, {1}, {1}, 1.0, 0.5, true};
  const ooc::ConvProblem p = spec.problem();
  const size_t whole = static_cast<size_t>(p.x_elements() + p.w_elements() + p.y_elements()) * 4;
  const auto r = ooc_test::run_and_check(spec, whole / 8, BackendKind::cuda, ooc_test::test_seed(__LINE__));
  EXPECT_GT(r.plan.num_chunks(), 4u) << r.plan.describe();
}

TEST_F(CudaBackend, Fp32NotTf32) {
  // Random fp32 inputs use all 23 mantissa bits; TF32 keeps 10, which puts the relative error near
  // 1e-4, an order of magnitude above the fp32 tolerance this checks.
  const ConvSpec spec{{1, 64, 16, 16}, {8, 64, 3, 3}, {1}, {1}};
  ooc_test::run_and_check(spec, 0, BackendKind::cuda, ooc_test::test_seed(__LINE__), 1e-5);
}

// A fault in the `countdown`-th copy or convolution surfaces as the right exception, and the
// next call, on the same process-wide backend, runs and is correct.
TEST_F(CudaBackend, FaultInjection) {
  const ConvSpec spec{{2, 8, 24, 24}, {6, 8, 3, 3}, {1}, {1}, {1}, 1.0, 0.0, true};
  const ooc::ConvProblem p = spec.problem();
  std::mt19937 rng(ooc_test::test_seed(__LINE__));
  const auto [x, w, b] = ooc_test::random_conv_inputs(p, rng);
  const ooc::Options o = ooc_test::options_for(BackendKind::cuda, 3 * ooc_test::needed_bytes(p, BackendKind::cuda));
  ASSERT_GE(ooc::plan_conv_forward(p, o).num_chunks(), 5u) << "too few chunks for countdown 5";
  for (int64_t countdown : {1, 2, 5}) {
    SCOPED_TRACE("countdown " + std::to_string(countdown));
    std::vector<float> y(static_cast<size_t>(p.y_elements()), NAN);
    ooc::testing::inject_fault("copy", countdown);
    EXPECT_THROW(ooc::conv_forward(p, x.data(), w.data(), b.data(), y.data(), o), ooc::cuda_error);
    ooc::testing::inject_fault("conv", countdown);
    EXPECT_THROW(ooc::conv_forward(p, x.data(), w.data(), b.data(), y.data(), o), ooc::cudnn_error);
    // Fault consumed: the next call succeeds and is right.
    ooc_test::run_and_check(spec, o.memory_limit, BackendKind::cuda, ooc_test::test_seed(__LINE__ + countdown));
  }
  // Armed and disarmed: nothing fails.
  ooc::testing::inject_fault("copy", 3);
  ooc::testing::inject_fault("copy", 0);
  ooc_test::run_and_check(spec, o.memory_limit, BackendKind::cuda, ooc_test::test_seed(__LINE__));
}

}  // namespace
