// The gradients' planner, without running anything: the inverse halo arithmetic against brute
// force, and on many problems and budgets every backward plan must tile its output exactly once,
// reduce exactly once with the right first/last flags, read exactly the contributing dy rows, hold
// its budget, keep chunks under 2^31 elements and count its traffic as its loads add up.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <random>
#include <string>

#include "backward_plan_checks.hpp"
#include "ooc/errors.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/planner.hpp"

namespace {

using ooc::ConvProblem;
using ooc::Operation;
using ooc::Plan;
using ooc::PlannerConfig;
using ooc::Range;
using ooc_test::BackwardSpec;
using ooc_test::backward_spec;

using ooc_test::config;

size_t needed_bytes(const ConvProblem& p, size_t workspace = 0) {
  return ooc_test::smallest_budget(ooc::plan_conv_backward_for, p, workspace);
}

// An H200-like machine (docs/ARCHITECTURE.md, "Machine figures"): links at tens of GB/s, compute far faster, so plans
// are ranked by the bytes they move.
PlannerConfig link_bound(size_t memory_limit) {
  PlannerConfig c = config(memory_limit);
  c.machine.h2d_bytes_per_s = c.machine.d2h_bytes_per_s = 54e9;
  c.machine.bidir_bytes_per_s = 88e9;
  c.machine.flops_per_s = 2e14;
  return c;
}

constexpr Operation kOps[] = {Operation::backward_data, Operation::backward_filter, Operation::backward_bias};

TEST(BackwardGeometry, ContributingRowsAndComputedRegionAgainstBruteForce) {
  // Every target range of every small geometry: the rows read are exactly those with a tap in the
  // target; the device rows contain them, start at most a row before, stay inside dy; the computed
  // region contains the target and is what cuDNN derives from the device rows with padding 0.
  int64_t checked = 0, empty = 0, zero_rows = 0;
  for (int64_t in = 1; in <= 13; ++in)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 4; ++s)
        for (int64_t pad = 0; pad <= 3; ++pad)
          for (int64_t dil = 1; dil <= 3; ++dil) {
            const int64_t out = ooc::conv_output_size(in, k, s, pad, dil);
            if (out <= 0) continue;
            for (int64_t b = 0; b < in; ++b)
              for (int64_t e = b + 1; e <= in; ++e) {
                const Range target{b, e};
                SCOPED_TRACE("in " + std::to_string(in) + " k " + std::to_string(k) + " s " + std::to_string(s) +
                             " p " + std::to_string(pad) + " d " + std::to_string(dil) + " target [" +
                             std::to_string(b) + ", " + std::to_string(e) + ")");
                const auto expect = ooc_test::contributing_rows(target, out, k, s, pad, dil);
                const Range read = ooc::conv_output_range_reading(target, out, k, s, pad, dil);
                ASSERT_EQ(read, (Range{expect.first, expect.second}));
                const ooc::BackwardDataRows r = ooc::backward_data_rows(target, out, k, s, pad, dil);
                if (expect.first < expect.second) {
                  ASSERT_EQ(r.read, read);
                } else {
                  ASSERT_EQ(r.read.size(), 0);
                  ++empty;
                }
                ASSERT_GT(r.dy_rows.size(), 0);
                ASSERT_GE(r.dy_rows.begin, 0);
                ASSERT_LE(r.dy_rows.end, out);
                ASSERT_LE(r.dy_rows.begin, r.read.begin);
                ASSERT_GE(r.dy_rows.end, r.read.end);
                if (r.read.size() > 0) {
                  ASSERT_GE(r.dy_rows.begin, r.read.begin - 1);
                }
                ASSERT_EQ(r.computed.begin, r.dy_rows.begin * s - pad);
                ASSERT_LE(r.computed.begin, target.begin);
                ASSERT_GE(r.computed.end, target.end);
                ASSERT_EQ(ooc_test::cudnn_output_rows(r.computed.size(), k, s, 0, dil), r.dy_rows.size());
                zero_rows += r.dy_rows.size() - r.read.size();
                ++checked;
              }
          }
  std::cout << "[          ] " << checked << " targets, " << empty << " without contributing rows, " << zero_rows
            << " zero rows on the device in all\n";
  EXPECT_GT(empty, 100) << "stride > kernel span cases must be among them";
}

BackwardSpec random_spec(std::mt19937& rng, Operation op) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (;;) {
    BackwardSpec s;
    s.op = op;
    ooc_test::pick_geometry(s, pick, {5, 9, 9, {48, 16, 9}, 4, 4, 3});
    s.alpha = pick(0, 1) ? 1.0 : 0.5;
    s.beta = pick(0, 2) == 0 ? 0.75 : 0.0;
    try {
      s.problem();
      return s;
    } catch (const ooc::invalid_argument&) {
      // kernel larger than the padded input: draw again
    }
  }
}

class BackwardPlannerRandom : public ::testing::TestWithParam<Operation> {};

TEST_P(BackwardPlannerRandom, Properties) {
  const Operation op = GetParam();
  {
    const unsigned seed = 20261130 + static_cast<unsigned>(op);
    std::mt19937 rng(seed);
    std::map<std::string, int> kinds;
    int uneven = 0, plans = 0, empty_reads = 0;
    std::map<std::string, int> orders;
    for (int i = 0; i < 120; ++i) {
      ooc_test::plan_under_every_budget(
          ooc::plan_conv_backward_for, random_spec(rng, op).problem(),
          "seed " + std::to_string(seed) + ", problem " + std::to_string(i),
          [](const Plan& plan) { ooc_test::check_backward_plan(plan, true); },
          [&](const Plan& plan) {
            ++kinds[ooc_test::split_kind(plan)];
            ++orders[ooc::loop_order_name(plan.order)];
            uneven += ooc_test::uneven_edge(plan);
            for (const auto& ch : plan.chunks)
              for (int d = 0; d < ooc::kMaxSpatial; ++d)
                empty_reads += op == Operation::backward_data && ch.out_read[d].size() == 0;
            ++plans;
          });
      if (HasFailure()) return;
    }
    std::string summary;
    for (const auto& kv : kinds) summary += kv.first + ":" + std::to_string(kv.second) + " ";
    std::cout << "[          ] backward " << ooc_test::op_label(op) << ": " << plans << " plans; split kinds " << summary
              << "; uneven " << uneven << "; chunks reading no dy row " << empty_reads << "\n";
    // The set must exercise every split the operation has, alone and combined, and uneven edges
    // (EachDimensionSplitsAloneWhenForced covers each dimension alone).
    std::vector<std::string> dims = {"n", "k", "d0", "d1", "d2"};
    if (op != Operation::backward_bias) dims.push_back("c");
    std::map<std::string, int> split;
    int combos = 0;
    for (const auto& kv : kinds) {
      combos += kv.first.find('+') != std::string::npos ? kv.second : 0;
      for (const std::string& d : dims)
        if (("+" + kv.first + "+").find("+" + d + "+") != std::string::npos) split[d] += kv.second;
    }
    EXPECT_GT(kinds["none"], 0);
    for (const std::string& d : dims) EXPECT_GT(split[d], 0) << "no plan split " << d;
    EXPECT_GT(combos, 20);
    EXPECT_GT(uneven, 20);
    if (op == Operation::backward_data) {
      EXPECT_GT(empty_reads, 0) << "no chunk whose target no dy row reaches (stride > kernel span)";
      EXPECT_GT(orders["ns_outer"], 0);
      EXPECT_GT(orders["c_outer"], 0);
    }
    if (op == Operation::backward_filter) {
      EXPECT_GT(orders["k_outer"], 0);
      EXPECT_GT(orders["c_outer"], 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BackwardPlannerRandom, ::testing::ValuesIn(kOps),
                         [](const ::testing::TestParamInfo<Operation>& info) {
                           return std::string(ooc_test::op_label(info.param));
                         });

// Problems built so that only one dimension can split: backward data takes the forward's
// geometries; backward filter the spatial ones and its own n, k and c (dw is [k, c]; n reduces);
// backward bias has no kernel and no c.
std::vector<ooc_test::SingleSplitCase> single_splits() {
  const Operation D = Operation::backward_data, F = Operation::backward_filter, B = Operation::backward_bias;
  std::vector<ooc_test::SingleSplitCase> cases;
  for (const auto& g : ooc_test::single_split_geometries())
    cases.push_back({g.kind, backward_spec(D, g.x, g.w, g.stride, g.padding, g.dilation).problem()});
  for (const auto& g : ooc_test::spatial_single_split_geometries())
    cases.push_back({g.kind, backward_spec(F, g.x, g.w, g.stride, g.padding, g.dilation).problem()});
  for (const auto& [kind, spec] : std::vector<std::pair<const char*, BackwardSpec>>{
           {"n", backward_spec(F, {512, 1, 1}, {1, 1, 1})},
           {"k", backward_spec(F, {1, 1, 1}, {512, 1, 1})},
           {"c", backward_spec(F, {1, 512, 1}, {1, 512, 1})},
           {"n", backward_spec(B, {512, 1, 1}, {1, 1, 1})},
           {"k", backward_spec(B, {1, 1, 1}, {512, 1, 1})},
           {"d0", backward_spec(B, {1, 1, 512}, {1, 1, 1})},
           {"d2", backward_spec(B, {1, 1, 1, 1, 512}, {1, 1, 1, 1, 1})},
       })
    cases.push_back({kind, spec.problem()});
  return cases;
}

TEST(BackwardPlanner, EachDimensionSplitsAloneWhenForced) {
  ooc_test::expect_each_split_alone(ooc::plan_conv_backward_for, single_splits(),
                                    [](const Plan& plan) { ooc_test::check_backward_plan(plan, true); });
}

TEST(BackwardPlanner, OutOfBudgetSaysWhatTheSmallestPlanNeeds) {
  for (Operation op : kOps) {
    const ConvProblem p = backward_spec(op, {3, 5, 20, 18}, {7, 5, 3, 3}, {2, 1}, {1}, {1, 2}).problem();
    SCOPED_TRACE(p.describe());
    for (size_t workspace : {size_t{0}, size_t{4096}}) {
      size_t needed = 0;
      try {
        ooc::plan_conv_backward_for(p, config(200, workspace));
        FAIL() << "a 200-byte budget should not fit";
      } catch (const ooc::out_of_budget& e) {
        needed = e.needed_bytes();
        const std::string what = e.what();
        EXPECT_NE(what.find(std::to_string(needed)), std::string::npos) << what;
        EXPECT_NE(what.find("backward"), std::string::npos) << what;
      }
      Plan plan;
      ASSERT_NO_THROW(plan = ooc::plan_conv_backward_for(p, config(needed, workspace)));
      EXPECT_EQ(plan.peak_device_bytes, needed);
      EXPECT_EQ(plan.workspace_bytes, 0u) << "the tightest plan runs without the optional workspace";
      ooc_test::check_backward_plan(plan, true);
      EXPECT_THROW(ooc::plan_conv_backward_for(p, config(needed - 1, workspace)), ooc::out_of_budget);
      // With room for it, the allowance is kept (except by bias, which needs none).
      plan = ooc::plan_conv_backward_for(p, config(needed + workspace, workspace));
      EXPECT_EQ(plan.workspace_bytes, op == Operation::backward_bias ? 0u : workspace);
      ooc_test::check_backward_plan(plan, true);
    }
  }
}

TEST(BackwardPlanner, ChunksStayBelow2To31Elements) {
  // dy and dx of 2^32 elements: even with an unlimited budget no single chunk may hold them.
  for (Operation op : kOps) {
    const ConvProblem p = backward_spec(op, {1, 1, 65536, 65536}, {1, 1, 3, 3}, {1}, {1}).problem();
    SCOPED_TRACE(p.describe());
    const Plan plan = ooc::plan_conv_backward_for(p, config(size_t{1} << 42));
    EXPECT_GT(plan.num_chunks(), 1u) << plan.describe();
    ooc_test::check_backward_plan(plan, false);  // element counts < 2^31 are among its checks
  }
}

TEST(BackwardPlanner, FilterGradientTrafficStaysSmall) {
  // dw is a reduction over n and space: however finely x and dy are streamed, dw crosses the link
  // once (D2H), and x and dy once each when dw fits whole.
  const ConvProblem p = backward_spec(Operation::backward_filter, {64, 16, 32, 32}, {16, 16, 3, 3}, {1}, {1}).problem();
  const size_t x_bytes = static_cast<size_t>(p.x_elements()) * 4, dy_bytes = static_cast<size_t>(p.y_elements()) * 4;
  const size_t dw_bytes = static_cast<size_t>(p.w_elements()) * 4;
  const Plan plan = ooc::plan_conv_backward_for(p, link_bound((x_bytes + dy_bytes) / 16));
  SCOPED_TRACE(plan.describe());
  EXPECT_GT(plan.num_chunks(), 4u);
  EXPECT_EQ(plan.splits_k * plan.splits_c, 1) << "dw fits: no need to tile it";
  EXPECT_EQ(plan.bytes_d2h, dw_bytes);
  EXPECT_EQ(plan.bytes_h2d, x_bytes + dy_bytes) << "x and dy cross the link once each";
  ooc_test::check_backward_plan(plan, false);
}

TEST(BackwardPlanner, FilterGradientReservesWorkspaceForItsFastAlgorithm) {
  BackwardSpec spec = backward_spec(Operation::backward_filter, {8, 16, 32, 32, 32}, {16, 16, 3, 3, 3}, {1}, {1});
  const ConvProblem p = spec.problem();
  ooc::PlannerConfig cfg = config(static_cast<size_t>(p.x_elements()) * 4 / 2, 4096);
  cfg.filter_workspace_per_x_byte = 2.0;
  const Plan plan = ooc::plan_conv_backward_for(p, cfg);
  SCOPED_TRACE(plan.describe());
  EXPECT_GT(plan.num_chunks(), 1u);
  EXPECT_GE(plan.workspace_bytes, 2 * plan.x_slot_bytes - 256) << "ALGO_1's workspace fits beside the chunk";
  EXPECT_LE(plan.peak_device_bytes, cfg.memory_limit);
  ooc_test::check_backward_plan(plan, false);
  spec.op = Operation::backward_data;  // only backward filter reserves it
  EXPECT_EQ(ooc::plan_conv_backward_for(spec.problem(), cfg).workspace_bytes, 4096u);
}

TEST(BackwardPlanner, DataGradientKeepsWResident) {
  // w (2.25 MiB) dwarfs one sample; dy and dx stream by n while w stays (loaded once).
  const ConvProblem p = backward_spec(Operation::backward_data, {256, 256, 4, 4}, {256, 256, 3, 3}, {1}, {1}).problem();
  const Plan plan =
      ooc::plan_conv_backward_for(p, link_bound(static_cast<size_t>(p.w_elements()) * 4 + (size_t{1} << 20)));
  SCOPED_TRACE(plan.describe());
  EXPECT_GT(plan.num_chunks(), 1u);
  EXPECT_TRUE(plan.w_resident);
  EXPECT_EQ(plan.bytes_h2d, static_cast<size_t>(p.y_elements() + p.w_elements()) * 4);
  ooc_test::check_backward_plan(plan, false);
}

TEST(BackwardPlanner, DescribeNamesTheGradient) {
  for (Operation op : kOps) {
    const ConvProblem p = backward_spec(op, {8, 2, 64}, {3, 2, 3}).problem();
    const Plan plan = ooc::plan_conv_backward_for(p, config(needed_bytes(p)));
    const std::string d = plan.describe();
    EXPECT_NE(d.find(op == Operation::backward_data ? "backward data" : op == Operation::backward_filter
                                                                           ? "backward filter"
                                                                           : "backward bias"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find(op == Operation::backward_bias ? "(db)" : op == Operation::backward_filter ? "(dw)" : "(dx)"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find(std::to_string(plan.num_chunks()) + " chunks"), std::string::npos) << d;
  }
}

TEST(BackwardPlanner, ForwardPlannerRejectsBackwardProblemsAndBack) {
  const BackwardSpec spec = backward_spec(Operation::backward_data, {1, 1, 8}, {1, 1, 3});
  EXPECT_THROW(ooc::plan_conv_forward_for(spec.problem(), config(1 << 20)), std::logic_error);
  EXPECT_THROW(ooc::plan_conv_backward_for(spec.forward(), config(1 << 20)), std::logic_error);
  // plan_for dispatches on the operation.
  EXPECT_EQ(ooc::plan_for(spec.problem(), config(1 << 20)).problem.op, Operation::backward_data);
  EXPECT_EQ(ooc::plan_for(spec.forward(), config(1 << 20)).problem.op, Operation::forward);
}

}  // namespace
