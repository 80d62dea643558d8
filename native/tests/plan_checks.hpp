// Properties every forward-conv plan must have, checked with gtest assertions. Used by the planner
// tests (many problems and budgets, planning only) and by the pipeline tests (the plan that ran).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ooc/plan.hpp"
#include "test_util.hpp"

namespace ooc_test {

constexpr int64_t kTwoTo31 = int64_t{1} << 31;

// The input rows output rows [b, e) read, computed here independently of the library's
// conv_input_range: first tap of the first row to last tap of the last row, inclusive.
inline ooc::Range expected_input_range(ooc::Range out, int64_t kernel, int64_t stride, int64_t padding,
                                       int64_t dilation) {
  const int64_t first = out.begin * stride - padding;
  const int64_t last = (out.end - 1) * stride - padding + (kernel - 1) * dilation;
  return ooc::Range{first, last + 1};
}

inline size_t x_region_elements(const ooc::Chunk& ch) {
  int64_t e = ch.n.size() * ch.c.size();
  for (int d = 0; d < ooc::kMaxSpatial; ++d) e *= ch.in[d].size();
  return static_cast<size_t>(e);
}
inline size_t w_tile_elements(const ooc::Chunk& ch, const ooc::ConvProblem& p) {
  return static_cast<size_t>(ch.k.size() * ch.c.size() * p.kernel[0] * p.kernel[1] * p.kernel[2]);
}
inline size_t y_tile_elements(const ooc::Chunk& ch) {
  int64_t e = ch.n.size() * ch.k.size();
  for (int d = 0; d < ooc::kMaxSpatial; ++d) e *= ch.out[d].size();
  return static_cast<size_t>(e);
}

using OutBox = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
inline OutBox out_box(const ooc::Chunk& ch) {
  return {ch.n.begin, ch.n.end, ch.k.begin, ch.k.end, ch.out[0].begin, ch.out[0].end,
          ch.out[1].begin, ch.out[1].end, ch.out[2].begin, ch.out[2].end};
}

// How many dimensions a plan splits (n, k, c and each spatial one).
inline int split_dims(const ooc::Plan& p) {
  return (p.splits_n > 1) + (p.splits_k > 1) + (p.splits_c > 1) + (p.splits_out[0] > 1) + (p.splits_out[1] > 1) +
         (p.splits_out[2] > 1);
}

// Which dimensions a plan splits, as a label: "n", "k+c", "d0+d2", ... ("none" for one chunk).
inline std::string split_kind(const ooc::Plan& plan) {
  std::string s;
  auto add = [&](bool split, const char* name) {
    if (split) s += (s.empty() ? "" : "+") + std::string(name);
  };
  add(plan.splits_n > 1, "n");
  add(plan.splits_k > 1, "k");
  add(plan.splits_c > 1, "c");
  add(plan.splits_out[0] > 1, "d0");
  add(plan.splits_out[1] > 1, "d1");
  add(plan.splits_out[2] > 1, "d2");
  return s.empty() ? "none" : s;
}

// Whether some split dimension ends in a smaller tile. The spatial tiles are y's (dy's), except
// backward data's, which are dx's.
inline bool uneven_edge(const ooc::Plan& plan) {
  const ooc::ConvProblem& p = plan.problem;
  const bool dx_tiles = p.op == ooc::Operation::backward_data;
  bool u = (plan.splits_n > 1 && p.n % plan.tiling.n) || (plan.splits_k > 1 && p.k % plan.tiling.k) ||
           (plan.splits_c > 1 && p.c % plan.tiling.c);
  for (int d = 0; d < ooc::kMaxSpatial; ++d)
    u = u || (plan.splits_out[d] > 1 && (dx_tiles ? p.in[d] : p.out[d]) % plan.tiling.out[d]);
  return u;
}

// The ranges of one dimension, over all chunks, must partition [0, extent) into `splits` pieces of
// the plan's tile size (the last may be smaller); returns how many distinct ranges there were.
inline void check_dimension_ranges(const std::set<std::pair<int64_t, int64_t>>& ranges, int64_t extent,
                                   int64_t tile, int64_t splits, const char* what) {
  int64_t expect_begin = 0;
  for (const auto& r : ranges) {
    ASSERT_EQ(r.first, expect_begin) << what << ": ranges do not partition [0, " << extent << ")";
    ASSERT_GT(r.second, r.first) << what << ": empty range";
    ASSERT_EQ(r.second, std::min(r.first + tile, extent)) << what << ": range [" << r.first << ", " << r.second
                                                          << ") is not a tile of size " << tile;
    expect_begin = r.second;
  }
  ASSERT_EQ(expect_begin, extent) << what << ": ranges stop short of the extent";
  ASSERT_EQ(static_cast<int64_t>(ranges.size()), splits) << what << ": tile count differs from the plan's splits";
}

// Plans `p` with plan_for (a planner of plan/planner.hpp) under budgets from its tightest to one so
// large that nothing need split, checks each plan with check(plan) and then counts it with
// tally(plan). `name` says where p came from in failure messages. Stops at the first plan that
// fails a check: the caller returns on HasFailure().
template <typename PlanFor, typename Check, typename Tally>
void plan_under_every_budget(PlanFor plan_for, const ooc::ConvProblem& p, const std::string& name, Check check,
                             Tally tally) {
  const size_t needed = smallest_budget(plan_for, p);
  for (double factor : {1.0, 1.3, 2.0, 4.0, 16.0, 1e6}) {
    const size_t budget = static_cast<size_t>(static_cast<double>(needed) * factor);
    SCOPED_TRACE(name + ": " + p.describe() + ", memory_limit " + std::to_string(budget));
    ooc::Plan plan;
    ASSERT_NO_THROW(plan = plan_for(p, config(budget)));
    ASSERT_EQ(plan.memory_limit, budget);
    check(plan);
    ASSERT_FALSE(::testing::Test::HasFailure()) << plan.describe();
    tally(plan);
  }
}

// Geometries (x, w, stride, padding, dilation) built so that only one dimension, `kind`, can
// split: at the tightest budget it must. The spatial ones serve every operation with a kernel; n, k
// and c as here serve the forward convolution and backward data.
struct SingleSplitGeometry {
  const char* kind;
  Shape x, w, stride{1}, padding{0}, dilation{1};
};
inline std::vector<SingleSplitGeometry> spatial_single_split_geometries() {
  return {
      {"d0", {1, 1, 300}, {1, 1, 3}, {1}, {1}},
      {"d1", {1, 1, 3, 300}, {1, 1, 3, 3}, {1}, {0, 1}},
      {"d2", {1, 1, 3, 3, 300}, {1, 1, 3, 3, 3}, {1}, {0, 0, 2}, {1, 1, 2}},
  };
}
inline std::vector<SingleSplitGeometry> single_split_geometries() {
  std::vector<SingleSplitGeometry> g = {
      {"n", {8, 1, 256}, {1, 1, 256}},
      {"k", {1, 1, 256}, {8, 1, 256}},
      {"c", {1, 8, 256}, {1, 8, 256}},
  };
  for (SingleSplitGeometry& s : spatial_single_split_geometries()) g.push_back(std::move(s));
  return g;
}

// A problem that only the dimension `kind` (a split_kind label) can split.
struct SingleSplitCase {
  const char* kind;
  ooc::ConvProblem problem;
};

// Plans each case at its tightest budget with plan_for: the plan must split the case's dimension
// alone and pass check(plan).
template <typename PlanFor, typename Check>
void expect_each_split_alone(PlanFor plan_for, const std::vector<SingleSplitCase>& cases, Check check) {
  for (const SingleSplitCase& c : cases) {
    SCOPED_TRACE(c.problem.describe());
    const ooc::Plan plan = plan_for(c.problem, config(smallest_budget(plan_for, c.problem)));
    EXPECT_EQ(split_kind(plan), c.kind) << plan.describe();
    check(plan);
  }
}

// All structural properties of `plan`. count_elements: also count coverage element by element.
inline void check_plan(const ooc::Plan& plan, bool count_elements) {
  const ooc::ConvProblem& p = plan.problem;
  const auto& chunks = plan.chunks;
  ASSERT_FALSE(chunks.empty());
  ASSERT_EQ(static_cast<int64_t>(chunks.size()),
            plan.splits_n * plan.splits_k * plan.splits_c * plan.splits_out[0] * plan.splits_out[1] * plan.splits_out[2]);

  // --- budget and slots ---
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  EXPECT_EQ(plan.peak_device_bytes, plan.x_buffers * plan.x_slot_bytes + plan.w_buffers * plan.w_slot_bytes +
                                        plan.buffers * plan.y_slot_bytes + plan.bias_bytes + plan.workspace_bytes);
  EXPECT_GE(plan.buffers, 1);
  EXPECT_LE(plan.buffers, 3);
  if (p.has_bias) {
    EXPECT_GE(plan.bias_bytes, static_cast<size_t>(p.k) * 4);
  } else {
    EXPECT_EQ(plan.bias_bytes, 0u);
  }
  for (size_t s : {plan.x_slot_bytes, plan.w_slot_bytes, plan.y_slot_bytes, plan.bias_bytes})
    EXPECT_EQ(s % 256, 0u) << "device slots are 256-byte aligned";

  // --- per-dimension tiling ---
  std::set<std::pair<int64_t, int64_t>> rn, rk, rc, ro[ooc::kMaxSpatial];
  for (const ooc::Chunk& ch : chunks) {
    rn.insert({ch.n.begin, ch.n.end});
    rk.insert({ch.k.begin, ch.k.end});
    rc.insert({ch.c.begin, ch.c.end});
    for (int d = 0; d < ooc::kMaxSpatial; ++d) ro[d].insert({ch.out[d].begin, ch.out[d].end});
  }
  check_dimension_ranges(rn, p.n, plan.tiling.n, plan.splits_n, "n");
  check_dimension_ranges(rk, p.k, plan.tiling.k, plan.splits_k, "k");
  check_dimension_ranges(rc, p.c, plan.tiling.c, plan.splits_c, "c");
  for (int d = 0; d < ooc::kMaxSpatial; ++d)
    check_dimension_ranges(ro[d], p.out[d], plan.tiling.out[d], plan.splits_out[d], "out");
  if (::testing::Test::HasFatalFailure()) return;

  // --- output boxes (last_c chunks) tile y exactly once; c ranges tile [0, C) per box, in order ---
  std::set<OutBox> finished;
  std::set<OutBox> started;
  const ooc::Chunk* prev = nullptr;
  size_t y_sum = 0;
  size_t expect_h2d = (p.beta != 0.0 ? static_cast<size_t>(p.y_elements()) * 4 : 0) +
                      (p.has_bias ? static_cast<size_t>(p.k) * 4 : 0);
  size_t x_loads = 0, w_loads = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ooc::Chunk& ch = chunks[i];
    SCOPED_TRACE("chunk " + std::to_string(i) + ": " + describe_chunk(ch));
    const OutBox box = out_box(ch);
    ASSERT_EQ(ch.first_c, ch.c.begin == 0);
    ASSERT_EQ(ch.last_c, ch.c.end == p.c);
    if (ch.first_c) {
      ASSERT_TRUE(started.insert(box).second) << "output box started twice (its c reduction split apart)";
    } else {
      ASSERT_NE(prev, nullptr);
      ASSERT_EQ(out_box(*prev), box) << "c chunks of one output box are not consecutive";
      ASSERT_EQ(prev->c.end, ch.c.begin) << "c ranges of one output box are not in order";
    }
    if (ch.last_c) {
      ASSERT_TRUE(finished.insert(box).second) << "output box written twice";
      y_sum += y_tile_elements(ch);
    }

    // Input region per spatial dim: halo'd slab when split, the whole dim with padding otherwise.
    for (int d = 0; d < ooc::kMaxSpatial; ++d) {
      if (plan.splits_out[d] > 1) {
        EXPECT_EQ(ch.in[d], expected_input_range(ch.out[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]))
            << "dim " << d;
        EXPECT_EQ(ch.compute_padding[d], 0) << "dim " << d;
      } else {
        EXPECT_EQ(ch.out[d], (ooc::Range{0, p.out[d]})) << "dim " << d;
        EXPECT_EQ(ch.in[d], (ooc::Range{0, p.in[d]})) << "dim " << d;
        EXPECT_EQ(ch.compute_padding[d], p.padding[d]) << "dim " << d;
      }
    }

    // Element limits and slots.
    const size_t xe = x_region_elements(ch), we = w_tile_elements(ch, p), ye = y_tile_elements(ch);
    EXPECT_LT(static_cast<int64_t>(xe), kTwoTo31);
    EXPECT_LT(static_cast<int64_t>(we), kTwoTo31);
    EXPECT_LT(static_cast<int64_t>(ye), kTwoTo31);
    EXPECT_LE(xe * 4, plan.x_slot_bytes);
    EXPECT_LE(we * 4, plan.w_slot_bytes);
    EXPECT_LE(ye * 4, plan.y_slot_bytes);

    // Reuse: a chunk skips a load exactly when the region is the previous chunk's.
    if (!prev) {
      EXPECT_TRUE(ch.load_x);
      EXPECT_TRUE(ch.load_w);
    } else {
      const bool same_x = prev->n == ch.n && prev->c == ch.c && prev->in == ch.in;
      const bool same_w = prev->k == ch.k && prev->c == ch.c;
      EXPECT_EQ(ch.load_x, !same_x);
      EXPECT_EQ(ch.load_w, !same_w);
    }
    if (ch.load_x) {
      expect_h2d += xe * 4;
      ++x_loads;
    }
    if (ch.load_w) {
      expect_h2d += we * 4;
      ++w_loads;
    }
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) return;
    prev = &ch;
  }
  EXPECT_EQ(started.size(), finished.size()) << "a box was started but never finished";
  EXPECT_EQ(static_cast<int64_t>(finished.size()),
            plan.splits_n * plan.splits_k * plan.splits_out[0] * plan.splits_out[1] * plan.splits_out[2]);
  EXPECT_EQ(y_sum, static_cast<size_t>(p.y_elements()));

  // --- traffic ---
  EXPECT_EQ(plan.bytes_h2d, expect_h2d);
  EXPECT_EQ(plan.bytes_d2h, static_cast<size_t>(p.y_elements()) * 4);
  // The pipeline's depth, but never more slots than loads of the tensor.
  EXPECT_EQ(plan.x_buffers, std::min<size_t>(plan.buffers, x_loads)) << x_loads << " x loads";
  EXPECT_EQ(plan.w_buffers, std::min<size_t>(plan.buffers, w_loads)) << w_loads << " w loads";
  EXPECT_EQ(plan.w_resident, w_loads == 1);

  // --- loop order: the outer loop's tile index never goes back ---
  int64_t last_outer = -1;
  for (const ooc::Chunk& ch : chunks) {
    int64_t outer;
    if (plan.order == ooc::LoopOrder::k_outer) {
      outer = ch.k.begin / plan.tiling.k;
    } else {
      outer = ch.n.begin / plan.tiling.n;
      for (int d = 0; d < ooc::kMaxSpatial; ++d)
        outer = outer * plan.splits_out[d] + ch.out[d].begin / plan.tiling.out[d];
    }
    ASSERT_GE(outer, last_outer) << "chunk order does not follow " << ooc::loop_order_name(plan.order);
    last_outer = outer;
  }

  // --- element by element, for problems small enough ---
  if (count_elements) {
    std::vector<uint8_t> count(static_cast<size_t>(p.y_elements()), 0);
    for (const ooc::Chunk& ch : chunks) {
      if (!ch.last_c) continue;
      for_each_box_index(ch.n, ch.k, ch.out, p.k, p.out, [&](size_t i) {
        if (count[i] < 255) ++count[i];
      });
    }
    const auto bad = std::find_if(count.begin(), count.end(), [](uint8_t v) { return v != 1; });
    EXPECT_EQ(bad, count.end()) << "y element " << (bad - count.begin()) << " covered "
                                << (bad == count.end() ? 1 : int(*bad)) << " times";
    // Same for the reduction: every (n, k, out, c) combination computed exactly once.
    std::map<OutBox, std::vector<uint8_t>> per_box;
    for (const ooc::Chunk& ch : chunks) {
      auto& v = per_box[out_box(ch)];
      v.resize(static_cast<size_t>(p.c), 0);
      for (int64_t c = ch.c.begin; c < ch.c.end; ++c) ++v[static_cast<size_t>(c)];
    }
    for (const auto& kv : per_box)
      EXPECT_TRUE(std::all_of(kv.second.begin(), kv.second.end(), [](uint8_t v) { return v == 1; }))
          << "channels of an output box not reduced exactly once";
  }
}

}  // namespace ooc_test
