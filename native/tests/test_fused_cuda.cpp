// The fused functions on the cuda backend (cuDNN in FP32, so the fp32 tolerance holds): the host
// cases' numerics against the float64 references, from pageable and pinned memory. Skips itself
// without a CUDA device.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "fused_run.hpp"

namespace {

using ooc::BackendKind;
using ooc_test::PipelineCase;

class FusedForwardCuda : public ooc_test::GpuTest<::testing::TestWithParam<PipelineCase>> {};

TEST_P(FusedForwardCuda, MatchesTheComposition) {
  const PipelineCase& pc = GetParam();
  const ooc::ConvProblem p = pc.spec.problem();
  const size_t budget =
      pc.budget_factor > 0
          ? static_cast<size_t>(static_cast<double>(ooc_test::needed_bytes(p, BackendKind::cuda)) * pc.budget_factor)
          : 0;
  unsigned salt = 0;
  for (const auto& [name, activation] : ooc_test::fused_activations()) {
    SCOPED_TRACE(name);
    const auto r = ooc_test::run_fused_forward_and_check(pc.spec, activation, budget, BackendKind::cuda,
                                                         ooc_test::case_seed(pc.name, ++salt), false,
                                                         ooc_test::CallerMemory::pageable, 2e-5);
    EXPECT_EQ(r.plan.backend, "cuda");
    if (budget) {
      EXPECT_GT(r.plan.num_chunks(), 1u) << r.plan.describe();
    }
  }
  const auto relu = ooc::fused_activation_from_name("relu", 0);
  ooc_test::run_fused_forward_and_check(pc.spec, relu, budget, BackendKind::cuda, ooc_test::case_seed(pc.name, ++salt),
                                        true, ooc_test::CallerMemory::pinned, 2e-5);
}

class FusedBackwardCuda : public ooc_test::GpuTest<ooc_test::FusedBackwardCaseTest> {};

// The host cases' geometries; the cuda backend reserves workspace and models costs its own way, so
// the budget asks for the case's split where one gives it, else for any split.
TEST_P(FusedBackwardCuda, MatchesTheThreeGradients) {
  size_t budget = 0;
  if (fc.expect) {
    budget = ooc_test::fused_backward_budget(p, BackendKind::cuda, fc.expect);
    if (!budget)
      budget = ooc_test::fused_backward_budget(p, BackendKind::cuda, [](const ooc::Plan& plan) {
        return plan.num_chunks() > 1;
      });
    ASSERT_GT(budget, 0u);
  }
  const unsigned seed = ooc_test::case_seed(fc.name, 7);
  for (const auto memory : {ooc_test::CallerMemory::pageable, ooc_test::CallerMemory::pinned}) {
    const auto r = ooc_test::run_fused_backward_and_check(fc.spec, budget, BackendKind::cuda, seed, memory, 2e-5);
    EXPECT_EQ(r.plan.backend, "cuda");
    if (budget) {
      EXPECT_GT(r.plan.num_chunks(), 1u) << r.plan.describe();
    }
  }
}

// The activation's backward folded in: cuDNN's ActivationBackward in place on the dy tile.
TEST_P(FusedBackwardCuda, ActivationFoldedIn) {
  unsigned seed = ooc_test::case_seed(fc.name, 17);
  for (const auto& [name, activation] : ooc_test::fused_activations()) {
    SCOPED_TRACE(name);
    const size_t budget =
        fc.expect ? static_cast<size_t>(1.3 * static_cast<double>(ooc_test::needed_bytes_of(
                                                   [&](const ooc::ConvProblem& q, const ooc::Options& o) {
                                                     return ooc::plan_activation_conv_backward_data_filter_bias(
                                                         q, activation, true, o);
                                                   },
                                                   p, BackendKind::cuda)))
                  : 0;
    const auto memory = ++seed % 2 ? ooc_test::CallerMemory::pinned : ooc_test::CallerMemory::pageable;
    ooc_test::run_fused_backward_and_check(fc.spec, budget, BackendKind::cuda, seed, memory, 2e-5, &activation, true);
  }
}

// The pooling's backward folded in too: cuDNN's PoolingBackward and ActivationBackward on each
// tile's windows, the tile's dy rows copied out on the device.
TEST_P(FusedBackwardCuda, PoolingFoldedIn) {
  unsigned seed = ooc_test::case_seed(fc.name, 31);
  for (const auto& [name, window] : ooc_test::pooled_backward_windows()) {
    const auto pooling = ooc_test::pooling_of(p, {window[0]}, {window[1]}, {window[2]});
    if (!pooling) continue;  // y too small for this window
    const ooc::ConvProblem& pool = *pooling;
    SCOPED_TRACE(name);
    const size_t needed = ooc_test::pooled_backward_needed_bytes(p, pool, BackendKind::cuda);
    for (const ooc::PoolMode mode : {ooc::PoolMode::max, ooc::PoolMode::avg_exclude_pad}) {
      const auto memory = ++seed % 2 ? ooc_test::CallerMemory::pinned : ooc_test::CallerMemory::pageable;
      ooc_test::run_pooled_backward_and_check(fc.spec, pool, mode, needed * 13 / 10, BackendKind::cuda, seed, memory,
                                              2e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedBackwardCuda, ::testing::ValuesIn(ooc_test::fused_backward_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// conv_bias_activation_pooling_forward: cuDNN's pooling of each finished y tile, from pageable and
// pinned memory.
TEST_P(FusedForwardCuda, PoolingMatchesTheComposition) {
  const PipelineCase& pc = GetParam();
  const ooc::ConvProblem conv = pc.spec.problem();
  const auto pooling = ooc_test::pooling_of(conv, {3}, {2}, {1});
  if (!pooling) GTEST_SKIP() << "y is too small for a 3-wide window";
  const ooc::ConvProblem& pool = *pooling;
  const size_t needed = ooc_test::needed_bytes_of(
      [&](const ooc::ConvProblem& c, const ooc::Options& o) {
        return ooc::plan_conv_bias_activation_pooling_forward(c, pool, o);
      },
      conv, BackendKind::cuda);
  unsigned seed = ooc_test::case_seed(pc.name, 400);
  const auto relu = ooc::fused_activation_from_name("relu", 0);
  for (const ooc::PoolMode mode : {ooc::PoolMode::max, ooc::PoolMode::avg_exclude_pad})
    for (const auto memory : {ooc_test::CallerMemory::pageable, ooc_test::CallerMemory::pinned})
      ooc_test::run_fused_pooling_and_check(pc.spec, relu, pool, mode, needed * 13 / 10, BackendKind::cuda, ++seed,
                                            memory, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(PipelineCases, FusedForwardCuda, ::testing::ValuesIn(ooc_test::pipeline_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

class FusedDeconvCuda : public ooc_test::GpuTest<ooc_test::DeconvCaseTest> {};

// deconv_bias_activation_forward on cuDNN: BackwardData as the transposed convolution, then
// cudnnAddTensor (bias) and cudnnActivationForward in place, pageable and pinned.
TEST_P(FusedDeconvCuda, MatchesTheComposition) {
  const size_t needed = needed_bytes(BackendKind::cuda);
  unsigned seed = ooc_test::case_seed(dc.name, 600);
  for (const auto& [name, activation] : ooc_test::fused_activations())
    for (const auto memory : {ooc_test::CallerMemory::pageable, ooc_test::CallerMemory::pinned}) {
      SCOPED_TRACE(name);
      ooc_test::run_deconv_and_check(dc, activation, alpha1, alpha2, needed * 13 / 10, BackendKind::cuda, ++seed,
                                     memory, 2e-5);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedDeconvCuda, ::testing::ValuesIn(ooc_test::deconv_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
