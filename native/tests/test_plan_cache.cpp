// The plan cache: a cached plan is exactly the plan the planner makes, every input the planner reads
// is part of the key, a failed plan is not kept, old plans go when the cache is full. And the host
// staging rule: a call plans without staging cost only when all its tensors are pinned.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "ooc/ooc.hpp"
#include "plan/plan_cache.hpp"
#include "plan/planner.hpp"
#include "plan/staging_cost.hpp"
#include "test_util.hpp"

namespace {

using ooc::ConvProblem;
using ooc::PlanKey;
using ooc::PlannerConfig;

ConvProblem problem(int64_t padding = 1, double alpha = 1.0, bool bias = false) {
  return ConvProblem::forward({8, 16, 32, 32}, {24, 16, 3, 3}, {1}, {padding}, {1}, 1, alpha, 0.0, bias);
}

PlanKey key(const ConvProblem& p, const PlannerConfig& c) { return PlanKey("conv").add(p).add(c); }

class PlanCache : public ::testing::Test {
 protected:
  void SetUp() override { ooc::clear_plan_cache(); }
  void TearDown() override { ooc::clear_plan_cache(); }
};

TEST_F(PlanCache, ASecondLookupReturnsThePlanTheFirstMade) {
  const ConvProblem p = problem();
  const PlannerConfig c = ooc_test::config(64 << 10);
  int made = 0;
  auto make = [&] {
    ++made;
    return ooc::plan_conv_forward_for(p, c);
  };
  const auto first = ooc::cached_plan(key(p, c), make);
  const auto second = ooc::cached_plan(key(p, c), make);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(ooc::plan_cache_hits(), 1u);
  const ooc::Plan fresh = ooc::plan_conv_forward_for(p, c);
  EXPECT_EQ(first->describe(), fresh.describe());
  ASSERT_EQ(first->chunks.size(), fresh.chunks.size());
  EXPECT_GT(first->chunks.size(), 1u);  // the budget forces a split: there is something to cache
}

TEST_F(PlanCache, EveryPlannerInputIsPartOfTheKey) {
  const ConvProblem p = problem();
  const PlannerConfig c = ooc_test::config(64 << 10);
  std::vector<PlanKey> keys{key(p, c), key(problem(0), c), key(problem(1, 2.0), c), key(problem(1, 1.0, true), c)};
  ConvProblem other_op = ConvProblem::backward_data({8, 24, 32, 32}, {24, 16, 3, 3}, {8, 16, 32, 32}, {1}, {1}, {1},
                                                    1, 1.0, 0.0);
  keys.push_back(key(other_op, c));
  PlannerConfig changed = c;
  changed.memory_limit += 256;
  keys.push_back(key(p, changed));
  changed = c;
  changed.workspace_bytes += 256;
  keys.push_back(key(p, changed));
  changed = c;
  changed.machine.host_copy_bytes_per_s *= 2;
  keys.push_back(key(p, changed));
  changed = c;
  changed.machine.flops_per_s *= 2;
  keys.push_back(key(p, changed));
  changed = c;
  changed.backend = "cuda";
  keys.push_back(key(p, changed));
  keys.push_back(PlanKey("conv_bias_activation_forward").add(p).add(c));
  for (size_t i = 0; i < keys.size(); ++i)
    for (size_t j = i + 1; j < keys.size(); ++j) EXPECT_NE(keys[i].bytes(), keys[j].bytes()) << i << " vs " << j;
  EXPECT_EQ(key(problem(), ooc_test::config(64 << 10)).bytes(), keys[0].bytes());
}

TEST_F(PlanCache, AFailedPlanIsNotKept) {
  const ConvProblem p = problem();
  const PlannerConfig tiny = ooc_test::config(ooc_test::smallest_budget(ooc::plan_conv_forward_for, p, 0) - 1);
  auto make = [&] { return ooc::plan_conv_forward_for(p, tiny); };
  EXPECT_THROW(ooc::cached_plan(key(p, tiny), make), ooc::out_of_budget);
  EXPECT_EQ(ooc::plan_cache_size(), 0u);
  EXPECT_THROW(ooc::cached_plan(key(p, tiny), make), ooc::out_of_budget);  // planned again, fails again
}

TEST_F(PlanCache, LeastRecentlyUsedPlansGoWhenFull) {
  // Each plan's chunk list takes 60% of the cache's 64 MiB (plan_cache.cpp): the second evicts the first.
  const size_t chunks = (size_t{64} << 20) / sizeof(ooc::Chunk) * 3 / 5;
  int made = 0;
  auto big_plan = [&] {
    ++made;
    ooc::Plan plan;
    plan.chunks.resize(chunks);
    return plan;
  };
  const auto a = ooc::cached_plan(PlanKey("a"), big_plan);
  ooc::cached_plan(PlanKey("b"), big_plan);
  EXPECT_EQ(ooc::plan_cache_size(), 1u);
  ooc::cached_plan(PlanKey("b"), big_plan);
  EXPECT_EQ(made, 2);  // the newest plan stays
  ooc::cached_plan(PlanKey("a"), big_plan);
  EXPECT_EQ(made, 3);  // the oldest went
  EXPECT_EQ(a->chunks.size(), chunks);  // a caller's plan outlives its eviction
}

TEST(HostStaging, OnlyCallsWhoseTensorsAreAllDirectPlanWithoutStagingCost) {
  PlannerConfig base = ooc_test::config(1 << 20);
  base.machine.host_copy_bytes_per_s = 10e9;
  const char x = 0, w = 0, y = 0;
  auto pinned_xy = [&](const void* t) { return t == &x || t == &y; };
  auto all = [](const void*) { return true; };
  EXPECT_DOUBLE_EQ(ooc::with_host_staging(base, {&x, &w, &y}, pinned_xy).machine.host_copy_bytes_per_s, 10e9);
  EXPECT_TRUE(std::isinf(ooc::with_host_staging(base, {&x, &w, &y}, all).machine.host_copy_bytes_per_s));
  // Absent tensors (nullptr) do not count: pinned x and y alone plan as pinned.
  EXPECT_TRUE(std::isinf(ooc::with_host_staging(base, {&x, nullptr, &y}, pinned_xy).machine.host_copy_bytes_per_s));
}

}  // namespace
