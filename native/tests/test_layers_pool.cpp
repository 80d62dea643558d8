// Pooling planners (layers.hpp): forward chunks tile y exactly once with x halos from
// conv_input_range; backward chunks tile dx exactly once, compute a region holding their tile from
// the dy rows that reach it; padded dims stay whole; the budget holds. Host numerics of a split
// max pooling with all-negative inputs (padding must act as -inf).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend_fixtures.hpp"
#include "ooc/layers.hpp"
#include "plan/conv_geometry.hpp"
#include "test_util.hpp"

namespace {

using ooc::Options;
using ooc::Plan;
using ooc::PoolMode;

using ooc_test::host_options;

TEST(PoolPlanner, ForwardTilesYOnceWithHalos) {
  const ooc::ConvProblem p = ooc::pool_problem({3, 4, 21, 17}, {3, 2}, {2, 1}, {0, 0});
  const Plan plan = ooc::plan_pool_forward(p, host_options(3 * 2 * 512));
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  EXPECT_GT(plan.splits_out[0] * plan.splits_out[1], 1);
  std::vector<int> seen(static_cast<size_t>(p.y_elements()), 0);
  for (const ooc::Chunk& ch : plan.chunks) {
    for (int d = 0; d < 2; ++d) {
      const bool whole = ch.out[d].size() == p.out[d];
      const ooc::Range want =
          whole ? ooc::Range{0, p.in[d]} : ooc::conv_input_range(ch.out[d], p.kernel[d], p.stride[d], 0, 1);
      EXPECT_EQ(ch.in[d], want);
      EXPECT_GE(ch.in[d].begin, 0);
      EXPECT_LE(ch.in[d].end, p.in[d]);
    }
    ooc_test::for_each_box_index(ch.n, ch.c, ch.out, p.c, p.out, [&](size_t i) { ++seen[i]; });
  }
  for (int v : seen) ASSERT_EQ(v, 1);
}

TEST(PoolPlanner, PaddedDimsSplitForwardOnly) {
  const ooc::ConvProblem p = ooc::pool_problem({1, 1, 40, 40}, {3}, {2}, {1, 0});
  const Plan backward = ooc::plan_pool_backward(ooc::pool_backward_problem(p), host_options(32 * 1024));
  EXPECT_EQ(backward.splits_out[0], 1);
  EXPECT_GT(backward.splits_out[1], 1);
  const Plan forward = ooc::plan_pool_forward(p, host_options(3 * 2 * 512));
  EXPECT_GT(forward.splits_out[0], 1);
  EXPECT_LE(forward.peak_device_bytes, forward.memory_limit);
  std::vector<int> seen(static_cast<size_t>(p.out[0]), 0);
  for (const ooc::Chunk& ch : forward.chunks) {
    // cuDNN's count from the loaded rows with symmetric padding covers the tile, aligned to it.
    const ooc::Range x = ch.in[0], y = ch.out[0], t = ch.target[0];
    EXPECT_EQ((x.size() + 2 * p.padding[0] - p.kernel[0]) / p.stride[0] + 1, y.size());
    EXPECT_EQ(x.begin, y.begin * p.stride[0]);
    EXPECT_GE(x.begin, 0);
    EXPECT_LE(y.begin, t.begin);
    EXPECT_GE(y.end, t.end);
    EXPECT_LE(x.end, p.in[0]);
    if (ch.out[1].begin == 0)
      for (int64_t o = t.begin; o < t.end; ++o) ++seen[static_cast<size_t>(o)];
  }
  for (int v : seen) ASSERT_EQ(v, 1);
}

TEST(PoolPlanner, BackwardTilesDxOnceAndComputesAroundIt) {
  for (const int64_t stride : {1, 2, 3}) {
    const ooc::ConvProblem p = ooc::pool_backward_problem(ooc::pool_problem({2, 3, 19, 23}, {2, 3}, {stride}, {0}));
    const Plan plan = ooc::plan_pool_backward(p, host_options(3 * 4 * 512));
    EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
    EXPECT_GT(plan.num_chunks(), 6u);
    std::vector<int> seen(static_cast<size_t>(p.x_elements()), 0);
    for (const ooc::Chunk& ch : plan.chunks) {
      for (int d = 0; d < 2; ++d) {
        EXPECT_LE(ch.in[d].begin, ch.target[d].begin);
        EXPECT_GE(ch.in[d].end, ch.target[d].end);
        EXPECT_GE(ch.in[d].begin, 0);
        EXPECT_LE(ch.in[d].end, p.in[d]);
        EXPECT_LE(ch.out[d].begin, ch.out_read[d].begin);
        EXPECT_GE(ch.out[d].end, ch.out_read[d].end);
        // Every dy row whose window reaches the tile is read.
        const ooc::Range reaching =
            ooc::conv_output_range_reading(ch.target[d], p.out[d], p.kernel[d], p.stride[d], 0, 1);
        if (reaching.size() == 0)
          EXPECT_EQ(ch.out_read[d].size(), 0);
        else
          EXPECT_EQ(ch.out_read[d], reaching);
      }
      ooc_test::for_each_box_index(ch.n, ch.c, ch.target, p.c, p.in, [&](size_t i) { ++seen[i]; });
    }
    for (int v : seen) ASSERT_EQ(v, 1);
  }
}

TEST(PoolPlanner, GeometryChecksNameTheArgument) {
  EXPECT_THROW(ooc::pool_problem({1, 1, 8, 8}, {3}, {1}, {2}), ooc::invalid_argument);
  EXPECT_THROW(ooc::pool_problem({1, 1, 4, 4}, {7}, {1}, {1}), ooc::invalid_argument);
  EXPECT_THROW(ooc::pool_problem({1, 1, 4, 4}, {2, 2, 2}, {1}, {0}), ooc::invalid_argument);
  EXPECT_THROW(ooc::pool_mode_from_name("sum"), ooc::invalid_argument);
  EXPECT_THROW(ooc::plan_pool_forward(ooc::pool_problem({64, 64, 64, 64}, {2}, {2}, {0}), host_options(100)),
               ooc::out_of_budget);
}

TEST(PoolHost, SplitMaxPoolOfNegativesStaysNegative) {
  std::mt19937 rng(11);
  const ooc::ConvProblem p = ooc::pool_problem({2, 3, 15, 16}, {3}, {2}, {1, 0});
  std::vector<float> x = ooc_test::random_vector(static_cast<size_t>(p.x_elements()), rng, -3.0);
  std::vector<float> y(static_cast<size_t>(p.y_elements()), NAN);
  Plan used;
  ooc::pool_forward(p, PoolMode::max, x.data(), y.data(), host_options(3 * 2 * 512), &used);
  EXPECT_GT(used.num_chunks(), 2u);
  for (int64_t n = 0; n < p.n * p.c; ++n)
    for (int64_t a = 0; a < p.out[0]; ++a)
      for (int64_t b = 0; b < p.out[1]; ++b) {
        double best = -INFINITY;
        for (int64_t i = a * 2 - 1; i < a * 2 + 2; ++i)
          for (int64_t j = b * 2; j < b * 2 + 3; ++j)
            if (i >= 0 && i < p.in[0] && j < p.in[1])
              best = std::max(best, static_cast<double>(x[static_cast<size_t>((n * p.in[0] + i) * p.in[1] + j)]));
        ASSERT_FLOAT_EQ(y[static_cast<size_t>((n * p.out[0] + a) * p.out[1] + b)], best);
      }
}

}  // namespace
