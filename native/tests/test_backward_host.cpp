// The gradients end to end on the host backend — planner, pipeline, region copies, host kernels —
// against the float64 references, under budgets that force every kind of split, staged and by
// direct DMA, with uneven edges, stride/dilation/padding mixes (stride beyond the kernel span
// included), alpha/beta, and the API's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "backward_run.hpp"

namespace {

using ooc::BackendKind;
using ooc::Operation;
using ooc::Plan;
using ooc_test::BackwardCase;
using ooc_test::BackwardSpec;
using ooc_test::backward_spec;
using ooc_test::HostDirectAccess;

class HostBackward : public ooc_test::StagedAndDirect<BackwardCase> {};

TEST_P(HostBackward, MatchesFloat64Reference) {
  const BackwardCase& bc = test_case();
  const auto r = ooc_test::run_backward_and_check(bc.spec, ooc_test::case_budget(bc, BackendKind::host),
                                                  BackendKind::host, ooc_test::case_seed(bc.name, direct()), 1e-5,
                                                  memory());
  EXPECT_TRUE(bc.expect(r.plan)) << "the budget did not cause the split this case is about:\n" << r.plan.describe();
  if (bc.uneven) {
    EXPECT_TRUE(ooc_test::uneven_edge(r.plan)) << "no uneven edge tile:\n" << r.plan.describe();
  }
  EXPECT_EQ(r.plan.backend, "host");
}

INSTANTIATE_TEST_SUITE_P(Cases, HostBackward, ooc_test::staged_and_direct(ooc_test::backward_cases()),
                         ooc_test::staged_or_direct_name<BackwardCase>);

// Where the stride exceeds the dilated kernel span, some dx rows get no gradient: they must end as
// exactly beta * dx (0 when beta == 0, even over NaN), also in tiles no dy row reaches at all.
TEST(HostBackwardData, RowsNoDyRowReachesGetBetaTimesDx) {
  for (double beta : {0.0, 0.5}) {
    for (bool direct : {false, true}) {
      SCOPED_TRACE("beta " + std::to_string(beta) + (direct ? ", direct" : ", staged"));
      const HostDirectAccess mode(direct);
      // Stride 200, kernel 1: only rows 0, 200, 400 and 600 get a gradient; tiles of 40 rows
      // (what the tightest budget allows) mostly contain none of them.
      const BackwardSpec s = backward_spec(Operation::backward_data, {2, 1, 640}, {1, 1, 1}, {200}, {0}, {1}, 1.0, beta);
      const ooc::ConvProblem p = s.problem();
      const auto r = ooc_test::run_backward_and_check(
          s, ooc_test::backward_needed_bytes(p, BackendKind::host), BackendKind::host, ooc_test::test_seed(__LINE__),
          1e-5, ooc_test::host_caller_memory(direct));
      ASSERT_GT(r.plan.splits_out[0], 4) << r.plan.describe();
      int empty_tiles = 0;
      for (const auto& ch : r.plan.chunks) empty_tiles += ch.out_read[0].size() == 0;
      EXPECT_GT(empty_tiles, 4) << "too few tiles without contributing dy rows:\n" << r.plan.describe();
      // The other rows: exactly 0 (beta 0, over NaN) or beta * old (the reference comparison).
      if (beta == 0.0) {
        for (size_t i = 0; i < r.output.size(); ++i) {
          if (i % 640 % 200 != 0) {
            ASSERT_EQ(r.output[i], 0.0f) << i;
          }
        }
      }
    }
  }
}

// Random problems of every gradient under tight, medium and generous budgets, staged and direct.
TEST(HostBackwardRandom, RandomProblemsAndBudgets) {
  const unsigned seed = ooc_test::test_seed(2);
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::map<std::string, int> kinds;
  int runs = 0;
  const Operation ops[] = {Operation::backward_data, Operation::backward_filter, Operation::backward_bias};
  while (runs < 60) {
    BackwardSpec s;
    s.op = ops[runs % 3];
    ooc_test::pick_geometry(s, pick, {4, 6, 6, {40, 12, 7}, 3, 4, 2});
    s.alpha = pick(0, 1) ? 1.0 : -0.5;
    s.beta = pick(0, 2) == 0 ? 0.5 : 0.0;
    ooc::ConvProblem p;
    try {
      p = s.problem();
    } catch (const ooc::invalid_argument&) {
      continue;  // kernel larger than the padded input
    }
    const size_t needed = ooc_test::backward_needed_bytes(p, BackendKind::host);
    const double factor = runs % 4 == 0 ? 1.0 : runs % 4 == 1 ? 2.0 : runs % 4 == 2 ? 5.0 : 1e4;
    const bool direct = (runs / 3) % 2 == 1;
    const HostDirectAccess mode(direct);
    SCOPED_TRACE("random run " + std::to_string(runs) + " of seed " + std::to_string(seed) +
                 (direct ? ", direct" : ", staged"));
    const auto r = ooc_test::run_backward_and_check(
        s, static_cast<size_t>(static_cast<double>(needed) * factor), BackendKind::host,
        seed + 1000u + static_cast<unsigned>(runs), 1e-5,
        ooc_test::host_caller_memory(direct));
    ++runs;
    if (HasFailure()) return;
    ++kinds[std::string(ooc_test::op_label(s.op)) + ":" + ooc_test::split_kind(r.plan)];
  }
  int split = 0;
  for (const auto& kv : kinds) split += kv.first.find(":none") == std::string::npos ? kv.second : 0;
  EXPECT_GT(split, 10) << "too few runs were split";
}

TEST(HostBackwardApi, PlanPredictsTheRunAndRunsAgree) {
  const BackwardSpec s = backward_spec(Operation::backward_data, {2, 4, 12, 10}, {3, 4, 3, 3}, {2, 1}, {1});
  const ooc::ConvProblem p = s.problem();
  ooc::Options o;
  o.backend = BackendKind::host;
  o.memory_limit = 2 * ooc_test::backward_needed_bytes(p, BackendKind::host);
  std::mt19937 rng(5);
  const auto dy = ooc_test::random_vector(static_cast<size_t>(p.y_elements()), rng);
  const auto w = ooc_test::random_vector(static_cast<size_t>(p.w_elements()), rng);
  std::vector<float> dx1(static_cast<size_t>(p.x_elements()), NAN), dx2 = dx1;
  Plan plan1, plan2;
  ooc::conv_backward_data(p, dy.data(), w.data(), dx1.data(), o, &plan1);
  ooc::conv_backward_data(p, dy.data(), w.data(), dx2.data(), o, &plan2);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(ooc::plan_conv_backward_data(p, o).describe(), plan1.describe());
  EXPECT_GT(plan1.num_chunks(), 1u);
}

TEST(HostBackwardApi, WrongOperationAndNullPointers) {
  const BackwardSpec s = backward_spec(Operation::backward_data, {1, 2, 8}, {3, 2, 3});
  const ooc::ConvProblem data = s.problem(), fwd = s.forward();
  BackwardSpec fs = s;
  fs.op = Operation::backward_filter;
  const ooc::ConvProblem filter = fs.problem();
  ooc::Options o;
  o.backend = BackendKind::host;
  std::vector<float> a(64, 1.0f), b(64, 1.0f), out(64, NAN);
  EXPECT_THROW(ooc::plan_conv_backward_data(fwd, o), ooc::invalid_argument);
  EXPECT_THROW(ooc::plan_conv_backward_filter(data, o), ooc::invalid_argument);
  EXPECT_THROW(ooc::plan_conv_forward(data, o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_backward_data(filter, a.data(), b.data(), out.data(), o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_backward_filter(data, a.data(), b.data(), out.data(), o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_backward_bias(data, a.data(), out.data(), o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_backward_data(data, nullptr, b.data(), out.data(), o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_backward_data(data, a.data(), nullptr, out.data(), o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_backward_filter(filter, a.data(), b.data(), nullptr, o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_backward_bias(ooc::ConvProblem::backward_bias({1, 2, 8}, 1, 0), nullptr, out.data(), o),
               ooc::invalid_argument);
  o.memory_limit = 16;
  EXPECT_THROW(ooc::conv_backward_data(data, a.data(), b.data(), out.data(), o), ooc::out_of_budget);
  for (float v : out) ASSERT_TRUE(std::isnan(v)) << "the output was written by a call that failed";
}

TEST(HostBackwardApi, ProblemChecksNameTheArgument) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const ooc::invalid_argument& e) {
      return e.what();
    }
    return "(nothing thrown)";
  };
  // dy must have the forward output's shape.
  std::string m = message([] { ooc::ConvProblem::backward_data({2, 4, 6, 7}, {4, 3, 3, 3}, {2, 3, 8, 8}, {1}, {0}, {1}, 1, 1, 0); });
  EXPECT_TRUE(ooc_test::names_argument(m, "dy")) << m;
  EXPECT_NE(m.find("[2, 4, 6, 6]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 4, 6, 7]"), std::string::npos) << m;
  m = message([] { ooc::ConvProblem::backward_filter({2, 3, 8, 8}, {2, 5, 6, 6}, {4, 3, 3, 3}, {1}, {0}, {1}, 1, 1, 0); });
  EXPECT_TRUE(ooc_test::names_argument(m, "dy")) << m;
  m = message([] { ooc::ConvProblem::backward_data({2, 4, 6}, {4, 3, 3}, {2, 3, 8, 8}, {1}, {0}, {1}, 1, 1, 0); });
  EXPECT_TRUE(ooc_test::names_argument(m, "x_shape")) << m;
  m = message([] { ooc::ConvProblem::backward_data({2, 4, 6, 6}, {4, 5, 3, 3}, {2, 3, 8, 8}, {1}, {0}, {1}, 1, 1, 0); });
  EXPECT_TRUE(ooc_test::names_argument(m, "x_shape")) << m;
  EXPECT_NE(m.find("channels"), std::string::npos) << m;
  m = message([] { ooc::ConvProblem::backward_bias({2, 4}, 1, 0); });
  EXPECT_TRUE(ooc_test::names_argument(m, "dy")) << m;
  m = message([] { ooc::ConvProblem::backward_bias({2, 0, 5}, 1, 0); });
  EXPECT_TRUE(ooc_test::names_argument(m, "dy")) << m;
  m = message([] { ooc::ConvProblem::backward_data({2, 4, 6, 6}, {4, 3, 3, 3}, {2, 3, 8, 8}, {0}, {0}, {1}, 1, 1, 0); });
  EXPECT_TRUE(ooc_test::names_argument(m, "stride")) << m;
}

}  // namespace
