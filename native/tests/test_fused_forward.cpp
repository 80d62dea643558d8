// conv_bias_activation_forward on the host backend: every activation, z apart from y and z in y,
// every split kind of the forward planner (the pipeline cases, with their budgets), pinned-like
// caller memory (direct DMA), the plan twin, and argument errors.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "fused_run.hpp"

namespace {

using ooc::BackendKind;
using ooc_test::HostDirectAccess;
using ooc_test::PipelineCase;

class FusedForwardHost : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(FusedForwardHost, EveryActivationMatchesTheComposition) {
  const PipelineCase& pc = GetParam();
  const size_t budget = ooc_test::budget_for(pc.spec.problem(), BackendKind::host, pc.budget_factor, pc.expect);
  ASSERT_TRUE(pc.budget_factor == 0 || budget > 0) << "no budget gives the split " << pc.name << " wants";
  unsigned salt = 0;
  for (const auto& [name, activation] : ooc_test::fused_activations()) {
    SCOPED_TRACE(name);
    const auto r = ooc_test::run_fused_forward_and_check(pc.spec, activation, budget, BackendKind::host,
                                                         ooc_test::case_seed(pc.name, ++salt));
    EXPECT_TRUE(pc.expect(r.plan)) << r.plan.describe();
  }
}

TEST_P(FusedForwardHost, ZInPlaceAndDirectDma) {
  const PipelineCase& pc = GetParam();
  const size_t budget = ooc_test::budget_for(pc.spec.problem(), BackendKind::host, pc.budget_factor, pc.expect);
  const auto relu = ooc::fused_activation_from_name("relu", 0);
  const unsigned seed = ooc_test::case_seed(pc.name, 100);
  ooc_test::run_fused_forward_and_check(pc.spec, relu, budget, BackendKind::host, seed, /*z_is_y=*/true);
  HostDirectAccess direct(true);
  ooc_test::run_fused_forward_and_check(pc.spec, relu, budget, BackendKind::host, seed + 1, false,
                                        ooc_test::CallerMemory::host_direct);
}

INSTANTIATE_TEST_SUITE_P(PipelineCases, FusedForwardHost, ::testing::ValuesIn(ooc_test::pipeline_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FusedForward, PlanIsTheForwardPlanNamedFused) {
  const ooc::ConvProblem p = ooc::ConvProblem::forward({2, 6, 20, 17}, {5, 6, 3, 3}, {1}, {1}, {1}, 1, 0.5, 1.0, true);
  const ooc::Options o = [] {
    ooc::Options o;
    o.backend = BackendKind::host;
    o.memory_limit = 16 << 10;
    return o;
  }();
  const ooc::Plan fused = ooc::plan_conv_bias_activation_forward(p, o);
  const ooc::Plan plain = ooc::plan_conv_forward(p, o);
  EXPECT_EQ(fused.fused, "conv_bias_activation_forward");
  EXPECT_EQ(fused.problem.op, ooc::Operation::forward);
  EXPECT_EQ(fused.num_chunks(), plain.num_chunks());
  EXPECT_EQ(fused.bytes_h2d, plain.bytes_h2d);  // z replaces y as what the first chunks read
  EXPECT_EQ(fused.bytes_d2h, plain.bytes_d2h);
  EXPECT_GT(fused.num_chunks(), 1u);
  EXPECT_NE(fused.describe().find("conv_bias_activation_forward"), std::string::npos) << fused.describe();
}

TEST(FusedForward, ArgumentErrors) {
  ooc::Options o;
  o.backend = BackendKind::host;
  const ooc::ConvProblem p = ooc::ConvProblem::forward({1, 2, 8}, {3, 2, 3}, {1}, {0}, {1}, 1, 1.0, 1.0, true);
  std::vector<float> x(16), w(18), b(3), y(18);
  const auto relu = ooc::fused_activation_from_name("relu", 0);
  EXPECT_THROW(ooc::conv_bias_activation_forward(p, relu, x.data(), w.data(), nullptr, b.data(), y.data(), o),
               ooc::invalid_argument);  // alpha2 != 0 reads z
  EXPECT_THROW(ooc::conv_bias_activation_forward(p, relu, x.data(), w.data(), y.data(), nullptr, y.data(), o),
               ooc::invalid_argument);  // has_bias needs bias
  const ooc::ConvProblem bwd = ooc::ConvProblem::backward_data({1, 3, 6}, {3, 2, 3}, {1, 2, 8}, {1}, {0}, {1}, 1, 1, 0);
  try {
    ooc::plan_conv_bias_activation_forward(bwd, o);
    ADD_FAILURE() << "a backward problem was accepted";
  } catch (const ooc::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("conv_backward_data"), std::string::npos) << e.what();
  }
  try {
    ooc::fused_activation_from_name("mish", 0);
    ADD_FAILURE() << "mish was accepted";
  } catch (const ooc::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("identity"), std::string::npos) << m;
    EXPECT_NE(m.find("swish"), std::string::npos) << m;
    EXPECT_NE(m.find("gelu"), std::string::npos) << m;
    EXPECT_NE(m.find("mish"), std::string::npos) << m;
  }
  // Without alpha2, z is never read and may be null.
  const ooc::ConvProblem no_z = ooc::ConvProblem::forward({1, 2, 8}, {3, 2, 3}, {1}, {0}, {1}, 1, 1.0, 0.0, false);
  EXPECT_NO_THROW(ooc::conv_bias_activation_forward(no_z, relu, x.data(), w.data(), nullptr, nullptr, y.data(), o));
}

// conv_bias_activation_pooling_forward: the pipeline cases' convolutions pooled (overlapping,
// tiled and gapped windows, every mode), under budgets from the smallest up.
struct PoolingCase {
  const char* name;
  ooc_test::Shape kernel, stride, padding;
};

class FusedPoolingHost : public ::testing::TestWithParam<ooc_test::PipelineCase> {};

TEST_P(FusedPoolingHost, MatchesTheComposition) {
  const ooc_test::PipelineCase& pc = GetParam();
  const ooc::ConvProblem conv = pc.spec.problem();
  unsigned seed = ooc_test::case_seed(pc.name, 300);
  const PoolingCase pools[] = {{"overlap", {3}, {2}, {1}}, {"tiles", {2}, {2}, {0}}, {"gapped", {1}, {3}, {0}}};
  for (const PoolingCase& pool_case : pools) {
    const auto pooling = ooc_test::pooling_of(conv, pool_case.kernel, pool_case.stride, pool_case.padding);
    if (!pooling) continue;  // y too small for this window
    const ooc::ConvProblem& pool = *pooling;
    const auto plan_fn = [&](const ooc::ConvProblem& c, const ooc::Options& o) {
      return ooc::plan_conv_bias_activation_pooling_forward(c, pool, o);
    };
    const size_t needed = ooc_test::needed_bytes_of(plan_fn, conv, BackendKind::host);
    for (double factor : {1.0, 1.7, 4.0}) {
      for (const ooc::PoolMode mode : {ooc::PoolMode::max, ooc::PoolMode::avg, ooc::PoolMode::avg_exclude_pad}) {
        SCOPED_TRACE(std::string(pool_case.name) + " x" + std::to_string(factor) + " mode " +
                     std::to_string(static_cast<int>(mode)));
        const auto act = ooc_test::fused_activations()[(seed % 7)];
        ooc_test::run_fused_pooling_and_check(pc.spec, act.second, pool, mode,
                                              static_cast<size_t>(static_cast<double>(needed) * factor),
                                              BackendKind::host, ++seed);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PipelineCases, FusedPoolingHost, ::testing::ValuesIn(ooc_test::pipeline_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FusedPooling, PoolMustPoolTheConvolutionsOutput) {
  const ooc::ConvProblem conv = ooc::ConvProblem::forward({1, 2, 8, 8}, {3, 2, 3, 3}, {1}, {0}, {1}, 1, 1, 0, false);
  const ooc::ConvProblem other = ooc::pool_problem({1, 3, 7, 7}, {2}, {2}, {0});
  EXPECT_THROW(ooc::plan_conv_bias_activation_pooling_forward(conv, other, ooc_test::host_options(0)),
               ooc::invalid_argument);
}

// deconv_bias_activation_forward: transposed convolutions (output_padding, strides beyond the
// kernel, dilation) with z, bias and every activation, whole and under budgets from the smallest up.
class FusedDeconvHost : public ooc_test::DeconvCaseTest {};

TEST_P(FusedDeconvHost, MatchesTheComposition) {
  const size_t needed = needed_bytes(BackendKind::host);
  unsigned seed = ooc_test::case_seed(dc.name, 500);
  for (const auto& [name, activation] : ooc_test::fused_activations())
    for (double factor : {0.0, 1.0, 2.5}) {
      SCOPED_TRACE(name + " x" + std::to_string(factor));
      const bool direct = ++seed % 3 == 0;
      HostDirectAccess access(direct);
      const auto r = ooc_test::run_deconv_and_check(
          dc, activation, alpha1, alpha2, static_cast<size_t>(static_cast<double>(needed) * factor),
          BackendKind::host, seed, ooc_test::host_caller_memory(direct));
      if (factor == 1.0) {
        EXPECT_GT(r.plan.num_chunks(), 1u) << r.plan.describe();
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedDeconvHost, ::testing::ValuesIn(ooc_test::deconv_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FusedDeconv, OutputPaddingMustBeBelowTheStride) {
  try {
    ooc::deconv_problem({1, 2, 5}, {2, 3, 3}, {2}, {0}, {2}, {1}, 1, 1, 0, true);
    ADD_FAILURE() << "output_padding == stride was accepted";
  } catch (const ooc::invalid_argument& e) {
    EXPECT_TRUE(ooc_test::names_argument(e.what(), "output_padding")) << e.what();
  }
  EXPECT_THROW(ooc::deconv_problem({1, 3, 5}, {2, 3, 3}, {1}, {0}, {0}, {1}, 1, 1, 0, true), ooc::invalid_argument);
}

}  // namespace
