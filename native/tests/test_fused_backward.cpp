// conv_backward_data_filter_bias on the host backend: (dx, dw, db) against the three float64
// references for every split kind the fused planner makes (n, c, each spatial dimension, with the
// dx rows two tiles share carried on the device), staged and by direct DMA; the plan's properties
// (dy loaded exactly once); alpha; and argument errors.
#include <gtest/gtest.h>

#include <string>

#include "fused_run.hpp"

namespace {

using ooc::BackendKind;
using ooc_test::FusedBackwardCase;
using ooc_test::HostDirectAccess;

class FusedBackwardHost : public ooc_test::FusedBackwardCaseTest {};

TEST_P(FusedBackwardHost, MatchesTheThreeGradients) {
  const size_t budget = fc.expect ? ooc_test::fused_backward_budget(p, BackendKind::host, fc.expect) : 0;
  ASSERT_TRUE(!fc.expect || budget > 0) << "no budget gives the split " << fc.name << " wants";
  const unsigned seed = ooc_test::case_seed(fc.name);
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "direct" : "staged");
    HostDirectAccess access(direct);
    const auto r = ooc_test::run_fused_backward_and_check(fc.spec, budget, BackendKind::host, seed + direct,
                                                          ooc_test::host_caller_memory(direct));
    if (fc.expect) {
      EXPECT_TRUE(fc.expect(r.plan)) << r.plan.describe();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedBackwardHost, ::testing::ValuesIn(ooc_test::fused_backward_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FusedBackward, AlphaScalesAllThree) {
  ooc_test::BackwardSpec spec =
      ooc_test::backward_spec(ooc::Operation::backward_data, {2, 3, 30, 7}, {4, 3, 3, 3}, {1}, {1}, {1}, -0.5);
  const size_t budget = ooc_test::fused_backward_budget(spec.problem(), BackendKind::host,
                                                        [](const ooc::Plan& p) { return p.splits_out[0] > 1; });
  ASSERT_GT(budget, 0u);
  ooc_test::run_fused_backward_and_check(spec, budget, BackendKind::host, ooc_test::test_seed(77));
}

TEST(FusedBackward, RandomGeometriesAndBudgets) {
  std::mt19937 rng(ooc_test::test_seed(78));
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int carried = 0;
  for (int i = 0; i < 60; ++i) {
    ooc_test::BackwardSpec spec;
    spec.op = ooc::Operation::backward_data;
    ooc_test::pick_geometry(spec, pick, {2, 3, 3, {300, 40, 12}, 4, 3, 3});
    ooc::ConvProblem p;
    try {
      p = spec.problem();
    } catch (const ooc::invalid_argument&) {
      continue;  // the kernel does not fit the padded input
    }
    // Every other problem under a budget that splits space (where one does), the rest at random.
    const size_t needed = ooc_test::fused_backward_needed_bytes(p, BackendKind::host);
    size_t budget = needed + static_cast<size_t>(pick(0, 4) * static_cast<int64_t>(needed) / 4);
    if (i % 2 == 0)
      if (const size_t spatial = ooc_test::fused_backward_budget(p, BackendKind::host, [](const ooc::Plan& plan) {
            return plan.splits_out[0] * plan.splits_out[1] * plan.splits_out[2] > 1;
          }))
        budget = spatial;
    const auto r = ooc_test::run_fused_backward_and_check(spec, budget, BackendKind::host, ooc_test::test_seed(100 + i));
    carried += r.plan.scratch_bytes > 0;
  }
  EXPECT_GE(carried, 8) << "too few random plans carried dx rows between spatial tiles";
}

TEST(FusedBackward, ArgumentErrors) {
  ooc::Options o;
  o.backend = BackendKind::host;
  const auto spec = ooc_test::backward_spec(ooc::Operation::backward_data, {1, 2, 8}, {3, 2, 3}, {1}, {0}, {1}, 1, 0.5);
  std::vector<float> x(16), w(18), dy(18), dx(16), dw(18), db(3);
  try {
    ooc::conv_backward_data_filter_bias(spec.problem(), x.data(), dy.data(), w.data(), dx.data(), dw.data(), db.data(),
                                        o);
    ADD_FAILURE() << "beta != 0 was accepted";
  } catch (const ooc::invalid_argument& e) {
    EXPECT_TRUE(ooc_test::names_argument(e.what(), "beta")) << e.what();
  }
  auto fresh = spec;
  fresh.beta = 0;
  EXPECT_THROW(ooc::conv_backward_data_filter_bias(fresh.problem(), x.data(), dy.data(), w.data(), dx.data(), nullptr,
                                                   db.data(), o),
               ooc::invalid_argument);
  const ooc::ConvProblem fwd = ooc::ConvProblem::forward({1, 2, 8}, {3, 2, 3}, {1}, {0}, {1}, 1, 1, 0, false);
  EXPECT_THROW(ooc::plan_conv_backward_data_filter_bias(fwd, o), ooc::invalid_argument);
  o.memory_limit = 64;
  EXPECT_THROW(ooc::plan_conv_backward_data_filter_bias(fresh.problem(), o), ooc::out_of_budget);
}

// activation_conv_backward_data_filter_bias: every activation, with and without the activation's
// input where y alone gives the gradient, on the fused backward's split kinds.
class ActivationFusedBackwardHost : public ooc_test::FusedBackwardCaseTest {};

TEST_P(ActivationFusedBackwardHost, EveryActivationMatchesTheComposition) {
  unsigned seed = ooc_test::case_seed(fc.name, 1000);
  for (const auto& [name, activation] : ooc_test::fused_activations()) {
    const bool y_suffices = activation.identity || activation.mode == ooc::ActivationMode::relu ||
                            activation.mode == ooc::ActivationMode::sigmoid || activation.mode == ooc::ActivationMode::tanh;
    for (bool with_pre : {true, false}) {
      if (!with_pre && !y_suffices) continue;
      SCOPED_TRACE(name + (with_pre ? " with pre" : " from y alone"));
      // The budget for this plan's own y-shaped inputs (more of them leave less room for the split).
      size_t budget = 0;
      if (fc.expect) {
        const auto plan_fn = [&](const ooc::ConvProblem& q, const ooc::Options& o) {
          return ooc::plan_activation_conv_backward_data_filter_bias(q, activation, with_pre, o);
        };
        budget = ooc_test::budget_where(plan_fn, p, BackendKind::host, fc.expect);
        ASSERT_GT(budget, 0u) << "no budget gives the split " << fc.name << " wants";
      }
      const bool direct = ++seed % 2 == 0;
      HostDirectAccess access(direct);
      const auto r = ooc_test::run_fused_backward_and_check(
          fc.spec, budget, BackendKind::host, seed, ooc_test::host_caller_memory(direct), 1e-5, &activation, with_pre);
      EXPECT_EQ(r.plan.fused, "activation_conv_backward_data_filter_bias");
    }
  }
}

// A few of the split kinds: every activation runs on each.
std::vector<FusedBackwardCase> activation_cases() {
  std::vector<FusedBackwardCase> all = ooc_test::fused_backward_cases(), some;
  for (const FusedBackwardCase& c : all)
    for (const char* name : {"whole_default_budget", "n_c", "d0_stride_dilation", "d1_2d", "d0_3d_with_n_c"})
      if (std::string(c.name) == name) some.push_back(c);
  return some;
}

INSTANTIATE_TEST_SUITE_P(Cases, ActivationFusedBackwardHost, ::testing::ValuesIn(activation_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ActivationFusedBackward, ActivationsWhoseGradientIsNotAFunctionOfYNeedTheirInput) {
  const ooc::ConvProblem p =
      ooc_test::backward_spec(ooc::Operation::backward_data, {1, 2, 8}, {3, 2, 3}).problem();
  for (const char* name : {"clipped_relu", "elu", "swish", "gelu", "leaky_relu"}) {
    try {
      ooc::plan_activation_conv_backward_data_filter_bias(p, ooc::fused_activation_from_name(name, 1.0), false,
                                                          ooc_test::host_options(0));
      ADD_FAILURE() << name << " was planned without pre";
    } catch (const ooc::invalid_argument& e) {
      EXPECT_TRUE(ooc_test::names_argument(e.what(), "pre")) << e.what();
    }
  }
}

// pooling_activation_conv_backward_data_filter_bias: the fused backward's cases pooled with each
// window kind and mode, under budgets from the smallest up.
class PoolingFusedBackwardHost : public ooc_test::FusedBackwardCaseTest {};

TEST_P(PoolingFusedBackwardHost, MatchesTheComposition) {
  unsigned seed = ooc_test::case_seed(fc.name, 2000);
  int ran = 0;
  for (const auto& [name, window] : ooc_test::pooled_backward_windows()) {
    const auto pooling = ooc_test::pooling_of(p, {window[0]}, {window[1]}, {window[2]});
    if (!pooling) continue;  // y too small for this window
    const ooc::ConvProblem& pool = *pooling;
    const size_t needed = ooc_test::pooled_backward_needed_bytes(p, pool, BackendKind::host);
    for (const ooc::PoolMode mode : {ooc::PoolMode::max, ooc::PoolMode::avg, ooc::PoolMode::avg_exclude_pad})
      for (double factor : {1.0, 3.0}) {
        SCOPED_TRACE(std::string(name) + " x" + std::to_string(factor));
        const bool direct = ++seed % 2 == 0;
        HostDirectAccess access(direct);
        ooc_test::run_pooled_backward_and_check(fc.spec, pool, mode,
                                                static_cast<size_t>(static_cast<double>(needed) * factor),
                                                BackendKind::host, seed, ooc_test::host_caller_memory(direct));
        ++ran;
      }
  }
  EXPECT_GT(ran, 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, PoolingFusedBackwardHost, ::testing::ValuesIn(activation_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
