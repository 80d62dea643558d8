// What the candidate search records of the candidates it costed (plan/candidate_search.hpp:
// top(), fitting(), Plan::candidates): the fastest distinct ones that fitted, fastest first, the
// winner first, for the pyooc logger's "the candidates it beat".
#include <gtest/gtest.h>

#include "plan/candidate_search.hpp"

namespace {

using ooc::planner_parts::CandidateSearch;
using ooc::planner_parts::Footprint;

auto costs(double seconds) {
  return [seconds] { return seconds; };
}

TEST(CandidateSummary, KeepsTheFiveFastestDistinctFittingCandidatesFastestFirst) {
  CandidateSearch<int> search(1000);
  const double seconds[] = {7, 3, 9, 1, 5, 8, 2, 6};
  for (int i = 0; i < 8; ++i) search.offer(i, {static_cast<size_t>(100 + i), 1, 1}, costs(seconds[i]));
  search.offer(8, {101, 1, 1}, costs(3));    // the same figures as candidate 1: listed once
  search.offer(9, {5000, 1, 1}, costs(0.5));  // over the budget: never costed, never listed
  ASSERT_EQ(search.top().size(), 5u);
  const double expected[] = {1, 2, 3, 5, 6};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(search.top()[i].predicted_seconds, expected[i]) << i;
  EXPECT_EQ(search.top()[0].peak_device_bytes, 103u);
  EXPECT_EQ(search.best(), 3);
  EXPECT_EQ(search.fitting(), 9);  // every fitting candidate counts, repeats included
}

TEST(CandidateSummary, SearchPlanStoresThemInThePlan) {
  const ooc::Plan plan = ooc::planner_parts::search_plan<int>(
      1000,
      [](CandidateSearch<int>& s) {
        s.offer(0, {200, 1, 4}, costs(2.0));
        s.offer(1, {300, 1, 2}, costs(1.0));
      },
      [](int, double best_seconds) {
        ooc::Plan p;
        p.predicted_seconds = best_seconds;
        return p;
      },
      [](size_t) {});
  ASSERT_EQ(plan.candidates.size(), 2u);
  EXPECT_EQ(plan.candidates[0].predicted_seconds, plan.predicted_seconds);
  EXPECT_EQ(plan.candidates[0].chunks, 2);
  EXPECT_EQ(plan.candidates[1].peak_device_bytes, 200u);
  EXPECT_EQ(plan.candidates_fitting, 2);
}

}  // namespace
