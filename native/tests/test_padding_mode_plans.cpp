// Plans of convolutions with a padding_mode: cuDNN pads with zeros only, so no chunk of a forward
// or filter-gradient plan under a mode leaves a padded dimension to cuDNN (compute_padding 0),
// whole dimensions included, and its x regions reach exactly the padding past the tensor (the
// gather's halo); unpadded dimensions are unaffected. Budgets from the tightest to one chunk.
#include <gtest/gtest.h>

#include <string>

#include "ooc/problem.hpp"
#include "plan/planner.hpp"
#include "test_util.hpp"

namespace {

using ooc::ConvProblem;
using ooc::PaddingMode;
using ooc_test::config;

ConvProblem with_mode(ConvProblem p, PaddingMode mode) {
  p.set_padding_mode(mode);
  return p;
}

void expect_explicit_halo(const ConvProblem& p) {
  const size_t needed = ooc_test::smallest_budget(ooc::plan_for, p);
  for (double factor : {1.0, 2.0, 8.0, 1e6}) {
    const ooc::Plan plan = ooc::plan_for(p, config(static_cast<size_t>(static_cast<double>(needed) * factor)));
    SCOPED_TRACE(p.describe() + " at " + std::to_string(factor) + "x the tightest budget");
    bool reads_before = false, reads_after = false;
    for (const ooc::Chunk& ch : plan.chunks) {
      for (int d = 0; d < p.spatial_dims; ++d) {
        if (p.padding[d] == 0 && p.padding_extra[d] == 0) {  // nothing to compute: never past the tensor
          ASSERT_TRUE(ch.in[d].begin >= 0 && ch.in[d].end <= p.in[d]) << "dimension " << d;
          continue;
        }
        ASSERT_EQ(ch.compute_padding[d], 0) << "cuDNN asked to pad dimension " << d << " under a mode";
        ASSERT_GE(ch.in[d].begin, -p.padding[d]) << "a halo past the padding";
        ASSERT_LE(ch.in[d].end, p.in[d] + p.padding[d] + p.padding_extra[d]) << "a halo past the padding";
        reads_before = reads_before || ch.in[d].begin < 0;
        reads_after = reads_after || ch.in[d].end > p.in[d];
      }
    }
    EXPECT_TRUE(reads_before && reads_after) << "no chunk read the halo the mode computes";
  }
}

TEST(PaddingModePlans, EveryPaddedDimensionIsPaddedExplicitly) {
  const ConvProblem forward = ConvProblem::forward({2, 3, 13, 11}, {4, 3, 3, 3}, {1, 2}, {1, 2}, {1}, 1, 1.0, 0.0,
                                                   false);
  // 3-D, the last dimension unpadded (a 1-wide kernel): it stays cuDNN's whatever the mode
  const ConvProblem filter = ConvProblem::backward_filter({1, 2, 7, 9, 6}, {1, 3, 7, 9, 6}, {3, 2, 3, 3, 1}, {1},
                                                          {1, 1, 0}, {1}, 1, 1.0, 0.0);
  for (PaddingMode mode : {PaddingMode::reflect, PaddingMode::replicate, PaddingMode::circular}) {
    expect_explicit_halo(with_mode(forward, mode));
    expect_explicit_halo(with_mode(filter, mode));
  }
}

TEST(PaddingModePlans, ZerosStillLeavesWholeSymmetricDimensionsToCudnn) {
  const ConvProblem p = ConvProblem::forward({1, 2, 6, 5}, {3, 2, 3, 3}, {1}, {1}, {1}, 1, 1.0, 0.0, false);
  const ooc::Plan zeros = ooc::plan_for(p, config(size_t{1} << 30));
  ASSERT_EQ(zeros.chunks.size(), 1u);
  EXPECT_EQ(zeros.chunks[0].compute_padding[0], 1);
  EXPECT_EQ(zeros.chunks[0].in[0].begin, 0);
  const ooc::Plan reflect = ooc::plan_for(with_mode(p, PaddingMode::reflect), config(size_t{1} << 30));
  ASSERT_EQ(reflect.chunks.size(), 1u);
  EXPECT_EQ(reflect.chunks[0].compute_padding[0], 0);
  EXPECT_EQ(reflect.chunks[0].in[0].begin, -1);
  EXPECT_EQ(reflect.chunks[0].in[0].end, 7);
}

}  // namespace
