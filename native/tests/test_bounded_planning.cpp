// Bounded planning (hardening issue, item 2): a planner never walks every tile of a long extent and
// never materializes more than kMaxChunks chunks; a budget that would need more says so.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <random>
#include <cstdint>
#include <string>

#include "ooc/errors.hpp"
#include "ooc/layers.hpp"
#include "ooc/problem.hpp"
#include "plan/candidate_search.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/layer_planners.hpp"
#include "plan/planner.hpp"

namespace {

using ooc::planner_parts::kMaxChunks;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ooc::PlannerConfig budget(size_t bytes) {
  ooc::PlannerConfig c;
  c.memory_limit = bytes;
  return c;
}

TEST(BoundedPlanning, ALongExtentPlansWithinTheChunkLimitInSeconds) {
  const int64_t long_extent = int64_t{1} << 40;
  const ooc::ConvProblem fwd = ooc::ConvProblem::forward({2, 3, long_extent}, {4, 3, 3}, {1}, {0}, {1}, 1, 1.0, 0.0,
                                                         false);
  ooc::Plan plan;
  const double s = seconds_of([&] { plan = ooc::plan_for(fwd, budget(size_t{1} << 30)); });
  EXPECT_LE(plan.chunks.size(), kMaxChunks);
  EXPECT_GE(plan.chunks.size(), 1u);
  EXPECT_LE(plan.peak_device_bytes, size_t{1} << 30);
  EXPECT_LT(s, 10.0) << "planning walked the extent";
  // A padding of 2^40 around seven elements: the output is long, the input is not.
  const ooc::ConvProblem padded =
      ooc::ConvProblem::forward({2, 3, 7}, {4, 3, 3}, {1}, {long_extent}, {1}, 1, 1.0, 0.0, false);
  EXPECT_LT(seconds_of([&] { plan = ooc::plan_for(padded, budget(size_t{1} << 30)); }), 10.0);
  EXPECT_LE(plan.chunks.size(), kMaxChunks);
}

TEST(BoundedPlanning, ABudgetThatNeedsTooManyChunksSaysSo) {
  const ooc::ConvProblem mm = ooc::matmul_problem({int64_t{1} << 30, 4}, {4, int64_t{1} << 20}, 1.0, 0.0, false);
  try {
    ooc::plan_matmul_for(mm, budget(size_t{1} << 20));
    ADD_FAILURE() << "planned";
  } catch (const ooc::out_of_budget& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("memory_limit of 1.00 MiB is too small for matmul"), std::string::npos) << what;
    EXPECT_NE(what.find("chunks, more than the limit of " + std::to_string(kMaxChunks) + "; raise memory_limit"),
              std::string::npos)
        << what;
  }
}

// Backward data's dy rows for a dx range without visiting every tap (kernels past 4096 taps):
// the same ranges as tap by tap, over every small geometry.
TEST(BoundedPlanning, OutputRowsReadingAnInputRangeMatchTapByTap) {
  std::mt19937 rng(13);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 200000; ++trial) {
    const int64_t kernel = pick(1, 12), stride = pick(1, 9), dilation = pick(1, 9), padding = pick(0, 12);
    const int64_t out = pick(1, 20), begin = pick(-15, 40);
    const ooc::Range in{begin, begin + pick(0, 12)};
    const ooc::Range taps =
        ooc::geometry_detail::output_range_reading_by_taps(in, out, kernel, stride, padding, dilation);
    const ooc::Range bounds =
        ooc::geometry_detail::output_range_reading_by_bounds(in, out, kernel, stride, padding, dilation);
    ASSERT_TRUE(taps.begin == bounds.begin && taps.end == bounds.end)
        << "in [" << in.begin << ", " << in.end << ") out " << out << " kernel " << kernel << " stride " << stride
        << " padding " << padding << " dilation " << dilation << ": taps [" << taps.begin << ", " << taps.end
        << "), bounds [" << bounds.begin << ", " << bounds.end << ")";
  }
}

TEST(BoundedPlanning, AKernelOfAMillionTapsPlansInSeconds) {
  const int64_t taps = int64_t{1} << 20;
  const ooc::ConvProblem bd =
      ooc::ConvProblem::backward_data({1, 1, 1}, {1, 1, taps}, {1, 1, taps}, {1}, {0}, {1}, 1, 1.0, 0.0);
  ooc::Plan plan;
  EXPECT_LT(seconds_of([&] { plan = ooc::plan_for(bd, budget(size_t{1} << 26)); }), 10.0);  // w: 4 MiB
  EXPECT_LE(plan.chunks.size(), kMaxChunks);
}

}  // namespace
