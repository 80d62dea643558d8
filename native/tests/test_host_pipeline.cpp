// The whole path — planner, pipeline, region copies, host backend — end to end through
// ooc::conv_forward, against the float64 reference, under budgets that force every kind of split.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <atomic>
#include <random>
#include <thread>
#include <tuple>

#include "conv_run.hpp"

namespace {

using ooc::BackendKind;
using ooc_test::ConvSpec;
using ooc_test::HostDirectAccess;
using ooc_test::PipelineCase;

class HostPipeline : public ooc_test::StagedAndDirect<PipelineCase> {};

TEST_P(HostPipeline, MatchesFloat64Reference) {
  const PipelineCase& pc = test_case();
  const ooc::ConvProblem p = pc.spec.problem();
  // The split this case is about (and an uneven edge where asked): find a budget that causes it.
  const ooc_test::SplitCheck want = [&](const ooc::Plan& plan) {
    return pc.expect(plan) && (!pc.uneven || ooc_test::uneven_edge(plan));
  };
  const size_t budget = ooc_test::budget_for(p, BackendKind::host, pc.budget_factor, want);
  ASSERT_TRUE(budget > 0 || pc.budget_factor == 0) << "no budget makes the planner split as this case needs";
  const auto r = ooc_test::run_and_check(pc.spec, budget, BackendKind::host, ooc_test::case_seed(pc.name, direct()),
                                         1e-5, memory());
  EXPECT_TRUE(want(r.plan)) << "the plan that ran is not the one planned for this budget:\n" << r.plan.describe();
  EXPECT_EQ(r.plan.backend, "host");
}

INSTANTIATE_TEST_SUITE_P(Cases, HostPipeline, ooc_test::staged_and_direct(ooc_test::pipeline_cases()),
                         ooc_test::staged_or_direct_name<PipelineCase>);

// Random problems under tight, medium and generous budgets: whatever the planner picks must be right.
TEST(HostPipelineRandom, RandomProblemsAndBudgets) {
  const unsigned seed = ooc_test::test_seed(1);
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::map<std::string, int> kinds;
  int runs = 0;
  while (runs < 60) {
    ConvSpec s;
    ooc_test::pick_geometry(s, pick, {4, 6, 6, {40, 12, 7}, 3, 3, 2});
    s.alpha = pick(0, 1) ? 1.0 : -0.5;
    s.beta = pick(0, 2) == 0 ? 0.5 : 0.0;
    s.bias = pick(0, 1) == 1;
    ooc::ConvProblem p;
    try {
      p = s.problem();
    } catch (const ooc::invalid_argument&) {
      continue;  // kernel larger than the padded input
    }
    if (p.y_elements() < 64) s.input_mean = 0.5;  // few long sums: avoid chance cancellation (ConvSpec)
    const size_t needed = ooc_test::needed_bytes(p, BackendKind::host);
    const double factor = runs % 3 == 0 ? 1.0 : runs % 3 == 1 ? 3.0 : 1e4;
    const bool direct = runs % 2 == 1;  // staged and direct-DMA paths alike
    const HostDirectAccess mode(direct);
    SCOPED_TRACE("random run " + std::to_string(runs) + " of seed " + std::to_string(seed) +
                 (direct ? ", direct" : ", staged"));
    const auto r = ooc_test::run_and_check(s, static_cast<size_t>(needed * factor), BackendKind::host,
                                           seed + 1000u + static_cast<unsigned>(runs), 1e-5,
                                           ooc_test::host_caller_memory(direct));
    ++runs;
    if (HasFailure()) return;
    std::string kind = std::to_string(ooc_test::split_dims(r.plan)) + " dims";
    ++kinds[kind];
  }
  EXPECT_GT(kinds["0 dims"] + kinds["1 dims"], 0);
  EXPECT_GT(kinds["2 dims"] + kinds["3 dims"] + kinds["4 dims"] + kinds["5 dims"], 0) << "no multi-dim split ran";
}

TEST(HostPipelineApi, SecondCallReusesTheBackendAndAgrees) {
  // Two calls with the same inputs and budget give bit-identical results (same plan, same order).
  const ConvSpec spec{{2, 4, 12, 10}, {3, 4, 3, 3}, {1}, {1}, {1}, 1.0, 0.0, true};
  const ooc::ConvProblem p = spec.problem();
  std::mt19937 rng(5);
  const auto [x, w, b] = ooc_test::random_conv_inputs(p, rng);
  const ooc::Options o = ooc_test::host_options(2 * ooc_test::needed_bytes(p, BackendKind::host));
  std::vector<float> y1(static_cast<size_t>(p.y_elements()), NAN), y2 = y1;
  ooc::Plan plan1, plan2;
  ooc::conv_forward(p, x.data(), w.data(), b.data(), y1.data(), o, &plan1);
  ooc::conv_forward(p, x.data(), w.data(), b.data(), y2.data(), o, &plan2);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(plan1.num_chunks(), plan2.num_chunks());
  // plan_conv_forward predicts exactly the plan that runs.
  const ooc::Plan predicted = ooc::plan_conv_forward(p, o);
  EXPECT_EQ(predicted.describe(), plan1.describe());
}

TEST(HostPipelineApi, DefaultLimitsApply) {
  const ConvSpec spec{{2, 3, 10}, {4, 3, 3}};
  const ooc::ConvProblem p = spec.problem();
  ooc::Options o;
  o.backend = BackendKind::host;
  // The host backend's own default is 1 GiB.
  EXPECT_EQ(ooc::plan_conv_forward(p, o).memory_limit, size_t{1} << 30);
  // A process-wide default replaces it; an explicit limit replaces both.
  const size_t needed = ooc_test::needed_bytes(p, BackendKind::host);
  ooc::set_default_memory_limit(needed);
  EXPECT_EQ(ooc::default_memory_limit(), needed);
  EXPECT_EQ(ooc::plan_conv_forward(p, o).memory_limit, needed);
  ooc_test::run_and_check(spec, 0, BackendKind::host, ooc_test::test_seed(__LINE__));
  o.memory_limit = needed * 3;
  EXPECT_EQ(ooc::plan_conv_forward(p, o).memory_limit, needed * 3);
  ooc::set_default_memory_limit(0);
  o.memory_limit = 0;
  EXPECT_EQ(ooc::plan_conv_forward(p, o).memory_limit, size_t{1} << 30);
}

TEST(HostPipelineApi, AutomaticBackendIsHostWithoutAGpu) {
  if (ooc::device_count() > 0) GTEST_SKIP() << "a GPU is present: automatic means cuda";
  const ooc::ConvProblem p = ConvSpec{{1, 1, 8}, {1, 1, 3}}.problem();
  ooc::Options o;
  EXPECT_EQ(ooc::plan_conv_forward(p, o).backend, "host");
}

TEST(HostPipelineApi, BadCallsThrowBeforeTouchingY) {
  const ConvSpec spec{{2, 3, 8, 8}, {4, 3, 3, 3}, {1}, {0}, {1}, 1.0, 0.0, true};
  const ooc::ConvProblem p = spec.problem();
  std::vector<float> x(static_cast<size_t>(p.x_elements()), 1.0f), w(static_cast<size_t>(p.w_elements()), 1.0f),
      b(4, 1.0f), y(static_cast<size_t>(p.y_elements()), NAN);
  ooc::Options o;
  o.backend = BackendKind::host;
  EXPECT_THROW(ooc::conv_forward(p, nullptr, w.data(), b.data(), y.data(), o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_forward(p, x.data(), nullptr, b.data(), y.data(), o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_forward(p, x.data(), w.data(), b.data(), nullptr, o), ooc::invalid_argument);
  EXPECT_THROW(ooc::conv_forward(p, x.data(), w.data(), nullptr, y.data(), o), ooc::invalid_argument);  // has_bias
  o.memory_limit = 512;
  try {
    ooc::conv_forward(p, x.data(), w.data(), b.data(), y.data(), o);
    ADD_FAILURE() << "512 bytes should not fit";
  } catch (const ooc::out_of_budget& e) {
    EXPECT_GT(e.needed_bytes(), 512u);
  }
  for (float v : y) ASSERT_TRUE(std::isnan(v)) << "y was written by a call that failed";
  // And the library still works afterwards.
  ooc_test::run_and_check(spec, 0, BackendKind::host, ooc_test::test_seed(__LINE__));
}

TEST(HostPipelineApi, ConcurrentCallsFromSeveralThreads) {
  // The process-wide backend serves one call at a time; calls from several threads must each be
  // right (different problems and budgets, so plans differ).
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      const ConvSpec spec{{1 + t, 3, 10 + t, 9}, {4, 3, 3, 3}, {1}, {1}, {1}, 1.0, t == 1 ? 0.5 : 0.0, t != 2};
      const ooc::ConvProblem p = spec.problem();
      std::mt19937 rng(100 + t);
      const auto [x, w, b] = ooc_test::random_conv_inputs(p, rng);
      const auto y_old = ooc_test::random_vector(static_cast<size_t>(p.y_elements()), rng);
      const auto ref = ooc_test::reference_conv(p, x, w, spec.bias ? &b : nullptr, &y_old);
      const ooc::Options o = ooc_test::host_options(2048 * (t + 1));
      for (int i = 0; i < 20; ++i) {
        std::vector<float> y = y_old;
        ooc::conv_forward(p, x.data(), w.data(), spec.bias ? b.data() : nullptr, y.data(), o);
        const auto c = ooc_test::compare(y, ref);
        failures += c.non_finite != 0 || !(c.relative_error < 1e-5);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(HostPipelineApi, BiasIgnoredWhenProblemHasNone) {
  // has_bias false: a bias pointer passed anyway must not be added.
  const ConvSpec spec{{1, 2, 6}, {3, 2, 3}};
  const ooc::ConvProblem p = spec.problem();
  std::mt19937 rng(9);
  const auto x = ooc_test::random_vector(static_cast<size_t>(p.x_elements()), rng);
  const auto w = ooc_test::random_vector(static_cast<size_t>(p.w_elements()), rng);
  std::vector<float> bias(3, 100.0f), y(static_cast<size_t>(p.y_elements()), NAN);
  ooc::Options o;
  o.backend = BackendKind::host;
  ooc::conv_forward(p, x.data(), w.data(), bias.data(), y.data(), o);
  const auto ref = ooc_test::reference_conv(p, x, w, nullptr, nullptr);
  EXPECT_LT(ooc_test::compare(y, ref).relative_error, 1e-5);
}

}  // namespace
