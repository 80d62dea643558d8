// GEMM and batch norm (layers.hpp) on the host backend: planner properties (tiles cover the
// output exactly once, K-split accumulation flags, budget held, two-pass batch norm) and numerics
// against float64 references under budgets that force every split.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "layers_run.hpp"
#include "plan/layer_planners.hpp"

namespace {

using namespace ooc_layers_test;

class HostGemm : public ooc_test::StagedAndDirect<GemmCase> {};

TEST_P(HostGemm, MatchesFloat64Reference) { run_gemm_case(test_case(), host_options(0)); }

INSTANTIATE_TEST_SUITE_P(
    Splits, HostGemm,
    ::testing::Combine(::testing::Values(GemmCase{7, 5, 9, false, false, false, 1.0, 0.0, 0},
                                         GemmCase{37, 29, 23, false, false, true, 1.0, 0.0, 4096},
                                         GemmCase{37, 29, 23, true, false, false, 0.5, 0.0, 3072},
                                         GemmCase{37, 29, 23, false, true, true, 1.0, 1.0, 3072},
                                         GemmCase{64, 300, 17, true, true, false, 2.0, -0.5, 2048},
                                         GemmCase{1, 1000, 1, false, false, true, 1.0, 0.0, 2048}),
                       ::testing::Bool()));

TEST(GemmPlanner, TinyBudgetSplitsEveryDimensionAndAccumulatesOverK) {
  const ooc::ConvProblem p = ooc::matmul_problem({200, 300}, {300, 100}, 1.0, 0.0, false);
  const Plan plan = ooc::plan_matmul(p, host_options(3 * 3 * 256 * 2));
  EXPECT_GT(plan.splits_n * plan.splits_k * plan.splits_c, 8);
  EXPECT_GT(plan.splits_c, 1);
  check_gemm_plan(plan, 200, 100, 300);
  EXPECT_EQ(plan.problem.op, Operation::matmul);
}

TEST(GemmPlanner, WholeProblemIsOneChunkWhenItFits) {
  const ooc::ConvProblem p = ooc::matmul_problem({20, 30}, {30, 10}, 1.0, 0.0, true);
  const Plan plan = ooc::plan_matmul(p, host_options(1 << 20));
  EXPECT_EQ(plan.num_chunks(), 1u);
}

TEST(GemmPlanner, CublasWorkspaceCountsInThePeakAndFallsBackToNone) {
  const ooc::ConvProblem p = ooc::matmul_problem({200, 300}, {300, 100}, 1.0, 0.0, false);
  ooc::PlannerConfig cfg;
  cfg.memory_limit = 1 << 20;
  cfg.workspace_bytes = 100000;  // rounded down to 256-byte multiples
  Plan plan = ooc::plan_matmul_for(p, cfg);
  EXPECT_EQ(plan.workspace_bytes, 99840u);
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  cfg.memory_limit = 20000;  // room for tiles only
  plan = ooc::plan_matmul_for(p, cfg);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  check_gemm_plan(plan, 200, 100, 300);
}

TEST(GemmPlanner, ImpossibleBudgetAndBadShapes) {
  const ooc::ConvProblem p = ooc::matmul_problem({20, 30}, {30, 10}, 1.0, 0.0, false);
  EXPECT_THROW(ooc::plan_matmul(p, host_options(256)), ooc::out_of_budget);
  try {
    ooc::matmul_problem({2, 3}, {4, 5}, 1.0, 0.0, false);
    FAIL();
  } catch (const ooc::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  }
}

class HostBatchnorm : public ooc_test::StagedAndDirect<BnCase> {};

TEST_P(HostBatchnorm, TrainingAndBackwardMatchFloat64) { run_bn_case(test_case(), host_options(0)); }

INSTANTIATE_TEST_SUITE_P(Splits, HostBatchnorm,
                         ::testing::Combine(::testing::Values(BnCase{{8, 3, 5, 7}, 0}, BnCase{{8, 3, 5, 7}, 4096},
                                                              BnCase{{5, 4, 3, 4, 6}, 2048}, BnCase{{9, 6}, 1024},
                                                              BnCase{{2, 3, 1000}, 3072}, BnCase{{1, 2, 3, 97}, 2048}),
                                            ::testing::Bool()));

TEST(BatchnormPlanner, TilesCoverXOnceAndHoldTheBudget) {
  const ooc_test::Shape shape{6, 5, 7, 9};
  const Plan plan =
      ooc::plan_batchnorm(ooc::batchnorm_problem(Operation::batchnorm_backward, shape), host_options(4096));
  EXPECT_EQ(plan.passes, 2);
  EXPECT_GT(plan.num_chunks(), 4u);
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  std::vector<int> covered(6 * 5 * 7 * 9, 0);
  int64_t index = 0;
  for (const auto& ch : plan.chunks) {
    EXPECT_EQ(ch.k.begin, index++);
    for (int64_t n = ch.n.begin; n < ch.n.end; ++n)
      for (int64_t c = ch.c.begin; c < ch.c.end; ++c)
        for (int64_t h = ch.in[0].begin; h < ch.in[0].end; ++h)
          for (int64_t w = ch.in[1].begin; w < ch.in[1].end; ++w) ++covered[((n * 5 + c) * 7 + h) * 9 + w];
  }
  for (int v : covered) ASSERT_EQ(v, 1);
  EXPECT_NE(plan.describe().find("2 passes"), std::string::npos) << plan.describe();
}

// The per-channel slots hold float32 coefficients and float64 chunk statistics whatever x's dtype:
// sized by x's element size, a half call's would be too small (C = 300: 3 * 300 halves are 1,800
// bytes, the coefficients 3,600), and a chunk of few elements a channel too small for its row.
TEST(BatchnormPlanner, PerChannelSlotsHoldTheirOwnElementsForHalfX) {
  for (Operation op : {Operation::batchnorm_forward_training, Operation::batchnorm_backward}) {
    const ooc::ConvProblem p = ooc::batchnorm_problem(op, {4, 300, 3, 2}, ooc::DType::float16);
    const Plan plan = ooc::plan_batchnorm(p, host_options(64 << 10));
    const int64_t per = op == Operation::batchnorm_backward ? 3 : 2;
    EXPECT_GE(plan.bias_bytes, static_cast<size_t>(per * 300) * sizeof(float)) << plan.describe();
    for (const auto& ch : plan.chunks)
      ASSERT_GE(plan.y_slot_bytes, static_cast<size_t>(2 * ch.c.size()) * sizeof(double)) << plan.describe();
  }
}

TEST(BatchnormApi, BadArguments) {
  EXPECT_THROW(ooc::batchnorm_problem(Operation::batchnorm_backward, {3}), ooc::invalid_argument);
  EXPECT_THROW(ooc::batchnorm_problem(Operation::matmul, {3, 4}), ooc::invalid_argument);
  const auto p = ooc::batchnorm_problem(Operation::batchnorm_forward_inference, {2, 2});
  std::vector<float> v(4, 1.0f);
  EXPECT_THROW(ooc::batchnorm_forward_inference(p, v.data(), v.data(), v.data(), v.data(), v.data(), 0.0, v.data(),
                                                host_options(0)),
               ooc::invalid_argument);
  const auto t = ooc::batchnorm_problem(Operation::batchnorm_forward_training, {1, 2});
  EXPECT_THROW(ooc::batchnorm_forward_training(t, v.data(), v.data(), v.data(), 1e-5, 0.1, nullptr, nullptr, v.data(),
                                               v.data(), v.data(), host_options(0)),
               ooc::invalid_argument);
}

}  // namespace
