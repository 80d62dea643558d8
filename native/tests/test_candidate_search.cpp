// The one candidate search every planner runs (plan/candidate_search.hpp): what its fit check
// drops, what counts as a need for the out_of_budget message, which of equally fast candidates it
// keeps, and that every planner's out-of-budget need is one its budget does not already hold.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "ooc/errors.hpp"
#include "ooc/layers.hpp"
#include "plan/candidate_search.hpp"
#include "plan/fused_planner.hpp"
#include "plan/layer_planner.hpp"
#include "plan/layer_planners.hpp"
#include "plan/planner.hpp"
#include "test_util.hpp"

namespace {

using ooc::planner_parts::CandidateSearch;
using ooc::planner_parts::Footprint;
using ooc::planner_parts::kMaxChunks;

constexpr size_t kBudget = 1000;

auto costs(double seconds) {
  return [seconds] { return seconds; };
}

TEST(CandidateSearch, DropsWhatBreaksTheLimitsAndNotesOnlyOverBudgetPeaksAsNeeds) {
  CandidateSearch<int> search(kBudget);
  int costed = 0;
  auto counted = [&] {
    ++costed;
    return 1.0;
  };
  search.offer(1, {10, ooc::kMaxChunkElements + 1, 1}, counted);                  // a chunk region too large
  search.offer(2, {20, 1, static_cast<double>(kMaxChunks) + 1}, counted);           // too many chunks
  search.offer(3, {kBudget + 500, 1, 1}, counted);                                 // over the budget
  search.offer(4, {kBudget + 100, 1, 1}, counted);
  EXPECT_FALSE(search.found());
  EXPECT_EQ(costed, 0) << "only candidates that fit are costed";
  EXPECT_EQ(search.smallest_need(), kBudget + 100) << "a candidate beyond the limits is no need, however small";

  search.offer(5, {kBudget, ooc::kMaxChunkElements, static_cast<double>(kMaxChunks)}, counted);  // at every limit
  EXPECT_TRUE(search.found());
  EXPECT_EQ(search.best(), 5);
  EXPECT_EQ(costed, 1);
}

TEST(CandidateSearch, NoNeedWhenEveryCandidateBreaksTheLimits) {
  CandidateSearch<int> search(kBudget);
  search.offer(1, {kBudget * 2, ooc::kMaxChunkElements + 1, 1}, costs(1));
  EXPECT_EQ(search.smallest_need(), std::numeric_limits<size_t>::max());
}

TEST(CandidateSearch, KeepsTheFastestAndTheEarlierOfEquallyFastOnes) {
  CandidateSearch<int> search(kBudget);
  search.offer(1, {100, 1, 1}, costs(2.0));
  search.offer(2, {100, 1, 1}, costs(2.0));              // a tie: the earlier stays
  search.offer(3, {100, 1, 1}, costs(2.0 * (1 - 1e-12)));  // rounding, not faster
  EXPECT_EQ(search.best(), 1);
  search.offer(4, {100, 1, 1}, costs(1.5));
  search.offer(5, {100, 1, 1}, costs(1.9));
  EXPECT_EQ(search.best(), 4);
  EXPECT_DOUBLE_EQ(search.best_seconds(), 1.5);
}

TEST(CandidateSearch, ExpandsTheWinnerOrReportsTheSmallestNeed) {
  using ooc::planner_parts::search_plan;
  auto enumerate = [](size_t over_budget_peak) {
    return [over_budget_peak](CandidateSearch<int>& search) {
      search.offer(7, {over_budget_peak, 1, 1}, costs(1.0));
      search.offer(8, {kBudget / 2, 1, 1}, costs(3.0));
    };
  };
  const ooc::Plan plan = search_plan<int>(
      kBudget, enumerate(kBudget + 1),
      [](int best, double seconds) {
        ooc::Plan p;
        p.splits_n = best;
        p.predicted_seconds = seconds;
        return p;
      },
      [](size_t) { ADD_FAILURE() << "a candidate fits"; });
  EXPECT_EQ(plan.splits_n, 8);
  EXPECT_DOUBLE_EQ(plan.predicted_seconds, 3.0);

  size_t reported = 0;
  EXPECT_THROW(search_plan<int>(
                   kBudget / 4, enumerate(kBudget + 1), [](int, double) { return ooc::Plan{}; },
                   [&](size_t need) {
                     reported = need;
                     throw ooc::out_of_budget("nothing fits", need);
                   }),
               ooc::out_of_budget);
  EXPECT_EQ(reported, kBudget / 2);
}

// Whatever a planner says the smallest plan needs, the budget it rejected did not hold: a need of
// at most the budget would tell the caller that the memory_limit given is enough.
template <typename PlanFor>
void expect_need_beyond_budget(const std::string& what, PlanFor plan_for, size_t budget) {
  SCOPED_TRACE(what + " at " + std::to_string(budget) + " bytes");
  try {
    plan_for(ooc_test::config(budget));
    ADD_FAILURE() << "planned";
  } catch (const ooc::out_of_budget& e) {
    EXPECT_GT(e.needed_bytes(), budget) << e.what();
  }
}

TEST(CandidateSearch, EveryPlannersNeedExceedsTheBudgetItRejects) {
  const ooc::ConvProblem conv = ooc_test::ConvSpec{{8, 16, 32, 32}, {32, 16, 3, 3}, {1}, {1}}.problem();
  const ooc::ConvProblem data = ooc::ConvProblem::backward_data(conv.y_shape(), conv.w_shape(), conv.x_shape(),
                                                                {1}, {1}, {1}, 1, 1.0, 0.0);
  const ooc::ConvProblem gemm = ooc::matmul_problem({512, 256}, {256, 384}, 1.0, 0.0, true);
  const ooc::ConvProblem norm = ooc::batchnorm_problem(ooc::Operation::batchnorm_backward, {8, 16, 32, 32});
  const ooc::ConvProblem pool = ooc::pool_problem({8, 16, 32, 32}, {3}, {2}, {1});
  for (size_t budget : {size_t{1}, size_t{300}}) {
    expect_need_beyond_budget("forward", [&](const auto& c) { return ooc::plan_for(conv, c); }, budget);
    expect_need_beyond_budget("backward data", [&](const auto& c) { return ooc::plan_for(data, c); }, budget);
    expect_need_beyond_budget("matmul", [&](const auto& c) { return ooc::plan_matmul_for(gemm, c); }, budget);
    expect_need_beyond_budget("batch norm", [&](const auto& c) { return ooc::plan_batchnorm_for(norm, c); }, budget);
    expect_need_beyond_budget("pool", [&](const auto& c) { return ooc::plan_pool(pool, c); }, budget);
    expect_need_beyond_budget("fused backward",
                              [&](const auto& c) { return ooc::plan_conv_backward_data_filter_bias_for(data, c); },
                              budget);
  }
  // A layer so large that every tile this budget holds would make more than 2^22 chunks: the need
  // is the least a plan within the chunk limit needs, not a tile the budget already holds.
  const ooc::ConvProblem huge = ooc::layer_problem(ooc::Operation::activation_forward, {int64_t{1} << 30, 1, 1});
  for (size_t budget : {size_t{512}, size_t{1024}, size_t{1536}})
    expect_need_beyond_budget(
        "activation", [&](const auto& c) { return ooc::plan_layer(huge, ooc::LayerPlanSpec{}, c); }, budget);
}

}  // namespace
