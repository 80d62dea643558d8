// The planner, without running anything: on many problems and budgets every plan must tile the
// output exactly once, reduce every channel exactly once, read the right halos, hold its budget,
// keep chunks under 2^31 elements and count its traffic right; and the cost model must pick sensibly.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "ooc/errors.hpp"
#include "plan/cost_model.hpp"
#include "plan/planner.hpp"
#include "plan_checks.hpp"
#include "test_util.hpp"

namespace {

using ooc::ConvProblem;
using ooc::Plan;
using ooc::PlannerConfig;
using ooc_test::ConvSpec;

using ooc_test::config;

size_t needed_bytes(const ConvProblem& p, size_t workspace = 0) {
  return ooc_test::smallest_budget(ooc::plan_conv_forward_for, p, workspace);
}

// A deterministic pseudo-random valid problem: 1D/2D/3D with stride, padding and dilation mixes.
ConvSpec random_spec(std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (;;) {
    ConvSpec s;
    ooc_test::pick_geometry(s, pick, {5, 9, 9, {48, 16, 9}, 4, 3, 2});
    s.alpha = pick(0, 1) ? 1.0 : 0.5;
    s.beta = pick(0, 2) == 0 ? 0.75 : 0.0;
    s.bias = pick(0, 1) == 1;
    try {
      s.problem();
      return s;
    } catch (const ooc::invalid_argument&) {
      // kernel larger than the padded input: draw again
    }
  }
}

TEST(Planner, PropertiesOnRandomProblems) {
  const unsigned seed = 20261129;
  std::mt19937 rng(seed);
  std::map<std::string, int> kinds;
  int uneven = 0, plans = 0, k_outer = 0, ns_outer = 0, w_resident = 0;
  for (int i = 0; i < 250; ++i) {
    ooc_test::plan_under_every_budget(
        ooc::plan_conv_forward_for, random_spec(rng).problem(),
        "seed " + std::to_string(seed) + ", problem " + std::to_string(i),
        [](const Plan& plan) { ooc_test::check_plan(plan, true); },
        [&](const Plan& plan) {
          ++kinds[ooc_test::split_kind(plan)];
          uneven += ooc_test::uneven_edge(plan);
          k_outer += plan.order == ooc::LoopOrder::k_outer;
          ns_outer += plan.order == ooc::LoopOrder::ns_outer;
          w_resident += plan.w_resident;
          ++plans;
        });
    if (HasFailure()) return;
  }
  std::string summary;
  for (const auto& kv : kinds) summary += kv.first + ":" + std::to_string(kv.second) + " ";
  std::cout << "[          ] " << plans << " plans; split kinds " << summary << "; uneven " << uneven << "; k_outer "
            << k_outer << ", ns_outer " << ns_outer << ", w resident " << w_resident << "\n";
  // The set must actually exercise every kind of split, alone and combined, and uneven edges,
  // or the properties above were checked on too little.
  for (const char* kind : {"none", "n", "k", "c", "d0", "d1", "d2"}) EXPECT_GT(kinds[kind], 0) << "no plan split " << kind << " alone";
  int combos = 0;
  for (const auto& kv : kinds) combos += kv.first.find('+') != std::string::npos ? kv.second : 0;
  EXPECT_GT(combos, 20);
  EXPECT_GT(uneven, 20);
  EXPECT_GT(k_outer, 0);
  EXPECT_GT(ns_outer, 0);
}

TEST(Planner, EachDimensionSplitsAloneWhenForced) {
  std::vector<ooc_test::SingleSplitCase> cases;
  for (const auto& g : ooc_test::single_split_geometries())
    cases.push_back({g.kind, ConvSpec{g.x, g.w, g.stride, g.padding, g.dilation}.problem()});
  ooc_test::expect_each_split_alone(ooc::plan_conv_forward_for, cases,
                                    [](const Plan& plan) { ooc_test::check_plan(plan, true); });
}

TEST(Planner, OutOfBudgetSaysWhatTheSmallestPlanNeeds) {
  const ConvProblem p = ConvSpec{{3, 5, 20, 18}, {7, 5, 3, 3}, {2, 1}, {1}, {1, 2}, 1.0, 0.0, true}.problem();
  for (size_t workspace : {size_t{0}, size_t{4096}}) {
    SCOPED_TRACE("workspace " + std::to_string(workspace));
    size_t needed = 0;
    try {
      ooc::plan_conv_forward_for(p, config(1000, workspace));
      FAIL() << "a 1000-byte budget should not fit";
    } catch (const ooc::out_of_budget& e) {
      const std::string what = e.what();
      needed = e.needed_bytes();
      EXPECT_NE(what.find("needs"), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(needed)), std::string::npos) << what;
      EXPECT_GT(needed, 1000u);
      // out_of_budget is a std::bad_alloc (Python: MemoryError).
      EXPECT_NE(dynamic_cast<const std::bad_alloc*>(&e), nullptr);
    }
    // Exactly the smallest peak: it fits, one byte less does not (and reports the same need). The
    // workspace allowance is optional (every algorithm has a zero-workspace fallback), so the need
    // does not include it and the tightest plan runs without.
    Plan plan;
    ASSERT_NO_THROW(plan = ooc::plan_conv_forward_for(p, config(needed, workspace)));
    EXPECT_EQ(plan.peak_device_bytes, needed);
    EXPECT_EQ(plan.workspace_bytes, 0u);
    ooc_test::check_plan(plan, true);
    try {
      ooc::plan_conv_forward_for(p, config(needed - 1, workspace));
      ADD_FAILURE() << "needed_bytes - 1 should not fit";
    } catch (const ooc::out_of_budget& e) {
      EXPECT_EQ(e.needed_bytes(), needed);
    }
  }
}

TEST(Planner, WorkspaceAllowanceCountsTowardsThePeak) {
  const ConvProblem p = ConvSpec{{2, 4, 16, 16}, {6, 4, 3, 3}, {1}, {1}}.problem();
  const size_t ws = 1 << 16;
  const size_t need = needed_bytes(p);
  EXPECT_EQ(needed_bytes(p, ws), need) << "the allowance is optional: the need is the same";
  // Room for the smallest plan plus the allowance: the plan keeps it, inside the budget.
  Plan plan = ooc::plan_conv_forward_for(p, config(need + ws, ws));
  EXPECT_EQ(plan.workspace_bytes, ws);
  EXPECT_EQ(plan.peak_device_bytes, need + ws);
  ooc_test::check_plan(plan, true);
  plan = ooc::plan_conv_forward_for(p, config(need + 3 * ws, ws));
  EXPECT_EQ(plan.workspace_bytes, ws);
  ooc_test::check_plan(plan, true);
  // One byte less: no plan fits with the allowance, so it plans without.
  plan = ooc::plan_conv_forward_for(p, config(need + ws - 1, ws));
  EXPECT_EQ(plan.workspace_bytes, 0u);
  ooc_test::check_plan(plan, true);
}

TEST(Planner, WorkspaceGrowsIntoTheBudgetThePlanLeaves) {
  const ConvProblem p = ConvSpec{{2, 4, 16, 16}, {6, 4, 3, 3}, {1}, {1}}.problem();
  const size_t ws = 1 << 16, need = needed_bytes(p);
  ooc::PlannerConfig cfg = config(need + 10 * ws, ws);
  const Plan fixed = ooc::plan_conv_forward_for(p, cfg);
  cfg.workspace_max = 4 * ws;
  Plan plan = ooc::plan_conv_forward_for(p, cfg);
  EXPECT_EQ(plan.num_chunks(), fixed.num_chunks()) << "growing the workspace does not change the split";
  EXPECT_EQ(plan.workspace_bytes, std::min(cfg.workspace_max, ws + (cfg.memory_limit - fixed.peak_device_bytes) / 256 * 256));
  EXPECT_EQ(plan.peak_device_bytes, fixed.peak_device_bytes + plan.workspace_bytes - ws);
  EXPECT_LE(plan.peak_device_bytes, cfg.memory_limit);
  ooc_test::check_plan(plan, true);
  cfg.workspace_max = size_t{1} << 40;  // unbounded: every byte the buffers leave
  plan = ooc::plan_conv_forward_for(p, cfg);
  EXPECT_GT(plan.peak_device_bytes + 256, cfg.memory_limit);
  EXPECT_LE(plan.peak_device_bytes, cfg.memory_limit);
  cfg.memory_limit = need;  // only the zero-workspace plan fits: it stays without workspace
  EXPECT_EQ(ooc::plan_conv_forward_for(p, cfg).workspace_bytes, 0u);
}

TEST(Planner, ChunksStayBelow2To31Elements) {
  // x has 2^32 elements: even with an unlimited budget no single chunk may hold it.
  const ConvProblem p = ConvSpec{{1, 1, 65536, 65536}, {1, 1, 3, 3}, {1}, {1}}.problem();
  ASSERT_EQ(p.x_elements(), int64_t{1} << 32);
  const Plan plan = ooc::plan_conv_forward_for(p, config(size_t{1} << 42));
  SCOPED_TRACE(plan.describe());
  EXPECT_GT(plan.num_chunks(), 1u);
  ooc_test::check_plan(plan, false);  // element counts < 2^31 are among its checks
  // Same with many channels: the limit is on elements, not bytes per channel.
  const ConvProblem q = ConvSpec{{2, 64, 8192, 4096}, {8, 64, 1, 1}}.problem();
  ASSERT_EQ(q.x_elements(), int64_t{1} << 32);
  const Plan qp = ooc::plan_conv_forward_for(q, config(size_t{1} << 42));
  ooc_test::check_plan(qp, false);
}

TEST(Planner, GenerousBudgetNeedsNoSplitWhenChunksCostALot) {
  // With a large per-chunk cost, a problem that fits whole runs as one chunk.
  const ConvProblem p = ConvSpec{{4, 8, 24, 24}, {16, 8, 3, 3}, {1}, {1}, {1}, 1.0, 0.5, true}.problem();
  PlannerConfig c = config(size_t{1} << 30);
  c.machine.chunk_overhead_s = 1.0;
  const Plan plan = ooc::plan_conv_forward_for(p, c);
  EXPECT_EQ(plan.num_chunks(), 1u) << plan.describe();
  EXPECT_TRUE(plan.w_resident);
  EXPECT_EQ(plan.bytes_h2d, static_cast<size_t>(p.x_elements() + p.w_elements() + p.y_elements() + p.k) * 4);
  ooc_test::check_plan(plan, true);
}

TEST(CostModel, FewerChunksArePreferredAllElseEqual) {
  // Same bytes, first load and last store: more chunks never predict less time, and strictly more
  // whenever the per-chunk cost is not hidden behind the links (compute-bound, or no overlap).
  ooc::MachineModel m;
  ooc::TrafficEstimate t;
  t.bytes_h2d = 1e8;
  t.bytes_d2h = 5e7;
  t.first_load_bytes = 1e6;
  t.last_store_bytes = 1e6;
  for (double flops : {0.0, 1e11}) {
    for (int buffers : {1, 2, 3}) {
      t.flops = flops;
      t.buffers = buffers;
      const bool overhead_visible = buffers == 1 || flops > 0;
      double prev = 0;
      for (double chunks : {1.0, 10.0, 1000.0, 1e5}) {
        t.num_chunks = chunks;
        // Keep one chunk's compute (the drain) equal too: only the chunk count changes.
        const double s = ooc::predict_seconds(t, m) - (flops / m.flops_per_s / chunks);
        if (overhead_visible) {
          EXPECT_GT(s, prev) << buffers << " buffers, " << chunks << " chunks, flops " << flops;
        } else {
          EXPECT_GE(s, prev) << buffers << " buffers, " << chunks << " chunks, flops " << flops;
        }
        prev = s;
      }
    }
  }
}

TEST(CostModel, TrafficAndOverlap) {
  ooc::MachineModel m;
  ooc::TrafficEstimate t;
  t.bytes_h2d = 1e9;
  t.bytes_d2h = 5e8;
  t.flops = 1e8;  // link-bound: 0.2 s H2D vs 0.05 s compute
  t.num_chunks = 16;
  t.first_load_bytes = t.bytes_h2d / 16;
  t.last_store_bytes = t.bytes_d2h / 16;
  t.buffers = 3;
  const double base = ooc::predict_seconds(t, m);
  // The link-bound steady state is at least the H2D time.
  EXPECT_GE(base, t.bytes_h2d / m.h2d_bytes_per_s);
  t.bytes_h2d *= 2;
  EXPECT_GT(ooc::predict_seconds(t, m), base) << "more bytes in must cost more";
  t.bytes_h2d /= 2;
  t.bytes_d2h *= 4;
  EXPECT_GT(ooc::predict_seconds(t, m), base) << "more bytes out must cost more";
  t.bytes_d2h /= 4;
  // Overlap: three slots beat two beat one.
  t.buffers = 2;
  const double two = ooc::predict_seconds(t, m);
  t.buffers = 1;
  const double one = ooc::predict_seconds(t, m);
  EXPECT_LT(base, two);
  EXPECT_LT(two, one);
}

TEST(Planner, FewerChunksAllElseEqual) {
  // 1x1 convolution with N = 64: every N tiling moves the same bytes and fits the budget; with the
  // links and compute almost free only the per-chunk cost tells the plans apart.
  const ConvProblem p = ConvSpec{{64, 4, 8, 8}, {4, 4, 1, 1}}.problem();
  PlannerConfig c = config(size_t{1} << 30);
  c.machine.flops_per_s = 1e15;           // compute free
  c.machine.h2d_bytes_per_s = 1e15;       // links free: only per-chunk costs remain
  c.machine.d2h_bytes_per_s = 1e15;
  c.machine.bidir_bytes_per_s = 1e15;
  c.machine.chunk_overhead_s = 1e-3;
  const Plan plan = ooc::plan_conv_forward_for(p, c);
  EXPECT_EQ(plan.num_chunks(), 1u) << plan.describe();
}

// An H200-like machine: links at tens of GB/s, compute far faster (docs/ARCHITECTURE.md, "Machine figures"), so plans
// are ranked by the bytes they move.
ooc::MachineModel link_bound_machine() {
  ooc::MachineModel m;
  m.h2d_bytes_per_s = 54e9;
  m.d2h_bytes_per_s = 55e9;
  m.bidir_bytes_per_s = 88e9;
  m.flops_per_s = 2e14;
  m.chunk_overhead_s = 2e-5;
  return m;
}

TEST(Planner, KeepsWResidentWhenWIsLargeRelativeToX) {
  // w (2.25 MiB) dwarfs one sample of x (16 KiB) and x (16 MiB) is far too big to keep: the
  // byte-optimal plan loads w once and streams x by N. Streaming w instead re-reads it per x tile,
  // and splitting K re-reads x per k tile.
  const ConvProblem p = ConvSpec{{1024, 256, 4, 4}, {256, 256, 3, 3}, {1}, {1}}.problem();
  const size_t w_bytes = static_cast<size_t>(p.w_elements()) * 4;
  const size_t x_bytes = static_cast<size_t>(p.x_elements()) * 4;
  PlannerConfig c = config(w_bytes + (size_t{1} << 20));
  c.machine = link_bound_machine();
  const Plan plan = ooc::plan_conv_forward_for(p, c);
  SCOPED_TRACE(plan.describe());
  EXPECT_GT(plan.num_chunks(), 1u);
  EXPECT_TRUE(plan.w_resident);
  EXPECT_EQ(plan.w_buffers, 1);
  EXPECT_EQ(plan.splits_k, 1);
  EXPECT_EQ(plan.splits_c, 1);
  size_t w_loads = 0;
  for (const auto& ch : plan.chunks) w_loads += ch.load_w;
  EXPECT_EQ(w_loads, 1u);
  // Each byte of x and w crosses the link once.
  EXPECT_EQ(plan.bytes_h2d, x_bytes + w_bytes);
  ooc_test::check_plan(plan, false);
}

TEST(Planner, WResidentMeansWLoadedOnce) {
  // Plan::w_resident (and describe()'s "w resident") must say that w is loaded once and stays.
  //
  // Regression: w_resident once followed w_buffers == 1, which single-buffer plans also have (e.g.
  // x[1, 1, 256] * w[8, 1, 256] at its smallest budget loads w 8 times).
  const ConvProblem p = ConvSpec{{1, 1, 256}, {8, 1, 256}}.problem();
  const Plan plan = ooc::plan_conv_forward_for(p, config(needed_bytes(p)));
  size_t w_loads = 0;
  for (const auto& ch : plan.chunks) w_loads += ch.load_w;
  EXPECT_EQ(plan.w_resident, w_loads == 1) << w_loads << " loads of w\n" << plan.describe();
  const bool says_resident = plan.describe().find("w resident") != std::string::npos;
  EXPECT_EQ(says_resident, w_loads == 1) << plan.describe();
}

TEST(Planner, NoIdleDeviceSlots) {
  // A plan reserves no ring slot it can never use: no more y slots than output boxes, no more x or
  // w slots than loads of them. The arena is allocated whole, so an idle slot is device memory
  // taken from everyone else (the default limit is most of the GPU).
  //
  // Regression: a one-chunk plan once kept 3 y slots (288 KiB of 508.75 KiB idle for
  // x[4, 8, 24, 24] * w[16, 8, 3, 3], padding 1, 1 GiB budget).
  const ConvProblem p = ConvSpec{{4, 8, 24, 24}, {16, 8, 3, 3}, {1}, {1}, {1}, 1.0, 0.5, true}.problem();
  PlannerConfig c = config(size_t{1} << 30);
  c.machine = link_bound_machine();
  const Plan plan = ooc::plan_conv_forward_for(p, c);
  std::set<ooc_test::OutBox> boxes;
  size_t x_loads = 0, w_loads = 0;
  for (const auto& ch : plan.chunks) {
    boxes.insert(ooc_test::out_box(ch));
    x_loads += ch.load_x;
    w_loads += ch.load_w;
  }
  EXPECT_LE(static_cast<size_t>(plan.buffers), boxes.size()) << plan.describe();
  EXPECT_LE(static_cast<size_t>(plan.x_buffers), x_loads) << plan.describe();
  EXPECT_LE(static_cast<size_t>(plan.w_buffers), w_loads) << plan.describe();
}

TEST(Planner, KeepsXWhenXIsLargeRelativeToW) {
  // x (4 MiB) dwarfs w (4 KiB), and y (16 MiB with K = 64) forces a split: x must not be re-read
  // per k tile (x traffic once, w may be re-read).
  const ConvProblem p = ConvSpec{{1, 16, 256, 256}, {64, 16, 1, 1}}.problem();
  const size_t x_bytes = static_cast<size_t>(p.x_elements()) * 4;
  const size_t w_bytes = static_cast<size_t>(p.w_elements()) * 4;
  PlannerConfig c = config(size_t{6} << 20);
  c.machine = link_bound_machine();
  const Plan plan = ooc::plan_conv_forward_for(p, c);
  SCOPED_TRACE(plan.describe());
  EXPECT_GT(plan.num_chunks(), 1u);
  size_t x_traffic = 0;
  for (const auto& ch : plan.chunks)
    if (ch.load_x) x_traffic += ooc_test::x_region_elements(ch) * 4;
  EXPECT_EQ(x_traffic, x_bytes);
  EXPECT_LT(plan.bytes_h2d, x_bytes + 64 * w_bytes);
  ooc_test::check_plan(plan, false);
}

TEST(Planner, DescribeMentionsTheSplit) {
  const ConvProblem p = ConvSpec{{8, 1, 256}, {1, 1, 256}}.problem();
  const Plan plan = ooc::plan_conv_forward_for(p, config(needed_bytes(p)));
  const std::string d = plan.describe();
  EXPECT_NE(d.find("n=8"), std::string::npos) << d;
  EXPECT_NE(d.find(std::to_string(plan.num_chunks()) + " chunks"), std::string::npos) << d;
}

}  // namespace

namespace {

// H200-like figures (docs/ARCHITECTURE.md): the link, not FP32 compute, bounds dense layers.
PlannerConfig h200_like(size_t memory_limit) {
  PlannerConfig c = config(memory_limit, size_t{128} << 20);
  c.backend = "cuda";
  c.machine.h2d_bytes_per_s = c.machine.d2h_bytes_per_s = 54e9;
  c.machine.bidir_bytes_per_s = 88e9;
  c.machine.flops_per_s = 2e13;
  c.machine.host_copy_bytes_per_s = 1e12;  // pinned arrays: no host staging
  return c;
}

}  // namespace

TEST(Planner, DepthwiseChunksHoldManyGroups) {
  // Chunks of few groups computed far below the link's speed on the H100 (cost_model.hpp,
  // kHalfRateGroupedChannels): the bench's depthwise layer (8 GiB) under 1 GiB is split in space
  // rather than into thin group tiles, forward as backward (planned only: nothing runs).
  const ConvProblem p =
      ConvProblem::forward({2, 64, 256, 256, 128}, {64, 1, 3, 3, 3}, {1}, {1}, {1}, 64, 1.0, 0.0, false);
  const Plan forward = ooc::plan_conv_forward_for(p, h200_like(size_t{1} << 30));
  SCOPED_TRACE(forward.describe());
  EXPECT_GT(forward.num_chunks(), 8u);
  EXPECT_GE(forward.tiling.g, 32);
  for (ooc::Operation op : {ooc::Operation::backward_data, ooc::Operation::backward_filter}) {
    ConvProblem b = p;
    b.op = op;
    const Plan backward = ooc::plan_conv_backward_for(b, h200_like(size_t{1} << 30));
    SCOPED_TRACE(backward.describe());
    EXPECT_GE(backward.tiling.g, 32);
  }
}
