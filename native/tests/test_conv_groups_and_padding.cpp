// Grouped and depthwise convolution (groups > 1) and asymmetric padding (torch's padding='same'
// with an even kernel): forward, backward data and backward filter
// against the float64 references' grouped products (backward_plan_checks.hpp's for_each_product),
// on fresh random inputs with NaN-poisoned outputs, under budgets from the tightest to one that
// needs no split, pageable and host-direct memory; and the plans' own properties: every chunk's
// channels are whole groups or lie inside one group, the split kinds along g, k and c inside a
// group all occur, the measured traffic is the planned one, and no chunk leaves an asymmetrically
// padded dimension to cuDNN's (symmetric) padding. The cuda backend runs the same cases (skipped
// without a GPU).
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend_fixtures.hpp"
#include "backward_plan_checks.hpp"
#include "conv_run.hpp"
#include "ooc/ooc.hpp"
#include "test_util.hpp"

namespace {

using namespace ooc_test;
using ooc::ConvProblem;
using ooc::Operation;

// A convolution's geometry: groups, and the padding after each dimension (empty: as before).
struct GroupedCase {
  const char* name;
  Shape x, w, stride{1}, padding{0}, dilation{1};
  int64_t groups;
  Shape padding_after{};
};

std::vector<GroupedCase> grouped_cases() {
  return {
      {"two_groups_1d", {3, 4, 40}, {6, 2, 3}, {1}, {1}, {1}, 2},
      {"three_groups_uneven_2d", {2, 6, 11, 9}, {9, 2, 3, 3}, {2, 1}, {1, 0}, {1, 2}, 3},
      {"five_groups_3d", {2, 10, 5, 6, 7}, {10, 2, 3, 3, 3}, {1}, {1}, {1}, 5},
      {"depthwise_2d", {2, 7, 12, 10}, {7, 1, 3, 3}, {1}, {1}, {1}, 7},
      {"depthwise_multiplier_3d", {1, 4, 6, 7, 8}, {12, 1, 3, 3, 3}, {1, 2, 1}, {1}, {1}, 4},
      // padding='same' with even kernels: one more after than before.
      {"same_even_kernel_1d", {2, 3, 30}, {4, 3, 4}, {1}, {1}, {1}, 1, {2}},
      {"same_even_kernel_grouped_2d", {2, 4, 10, 9}, {4, 2, 2, 4}, {1}, {0, 1}, {1}, 2, {1, 2}},
      // less after than before, with dilation and stride
      {"asymmetric_3d_dilated_strided", {1, 2, 6, 7, 9}, {3, 2, 2, 3, 2}, {1, 1, 2}, {0, 1, 1}, {1, 1, 2}, 1, {1, 1, 0}},
  };
}

ConvProblem forward_problem(const GroupedCase& c, double alpha = 1.0, double beta = 0.0, bool bias = false) {
  return ConvProblem::forward(c.x, c.w, c.stride, c.padding, c.dilation, c.groups, alpha, beta, bias,
                              ooc::DType::float32, c.padding_after);
}

ConvProblem problem_of(const GroupedCase& c, Operation op, double alpha, double beta) {
  const ConvProblem fwd = forward_problem(c);
  switch (op) {
    case Operation::forward: return forward_problem(c, alpha, beta, true);
    case Operation::backward_data:
      return ConvProblem::backward_data(fwd.y_shape(), c.w, c.x, c.stride, c.padding, c.dilation, c.groups, alpha,
                                        beta, ooc::DType::float32, c.padding_after);
    default:
      return ConvProblem::backward_filter(c.x, fwd.y_shape(), c.w, c.stride, c.padding, c.dilation, c.groups, alpha,
                                          beta, ooc::DType::float32, c.padding_after);
  }
}

struct Tensors {
  std::vector<float> x, w, y, bias;
};

// The reference result of p.op (y, dx or dw), blended with `old`.
std::vector<double> reference(const ConvProblem& p, const Tensors& t, const std::vector<float>& old) {
  const size_t size = p.op == Operation::forward         ? t.y.size()
                      : p.op == Operation::backward_data ? t.x.size()
                                                         : t.w.size();
  std::vector<double> out(size, 0.0);
  for_each_product(p, [&](size_t xi, size_t wi, size_t yi) {
    if (p.op == Operation::forward)
      out[yi] += double(t.x[xi]) * double(t.w[wi]);
    else if (p.op == Operation::backward_data)
      out[xi] += double(t.w[wi]) * double(t.y[yi]);
    else
      out[wi] += double(t.x[xi]) * double(t.y[yi]);
  });
  const int64_t plane = p.out[0] * p.out[1] * p.out[2];
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = p.alpha * out[i] + (p.beta != 0.0 ? p.beta * double(old[i]) : 0.0);
    if (p.op == Operation::forward && p.has_bias) out[i] += t.bias[(i / static_cast<size_t>(plane)) % p.k];
  }
  return out;
}

ooc::Plan plan_of(const ConvProblem& p, const ooc::Options& o) {
  switch (p.op) {
    case Operation::forward: return ooc::plan_conv_forward(p, o);
    case Operation::backward_data: return ooc::plan_conv_backward_data(p, o);
    default: return ooc::plan_conv_backward_filter(p, o);
  }
}

size_t smallest_budget(const ConvProblem& p, ooc::BackendKind backend) { return needed_bytes_of(plan_of, p, backend); }

// Whether some chunk of the plan holds several groups, part of one group's k, part of one's c.
struct GroupSplits {
  bool several_groups = false, part_of_k = false, part_of_c = false, groups_split = false;
};

// Each chunk's k and c ranges: whole groups (the same ones for k and c) or inside one group.
GroupSplits check_group_ranges(const ooc::Plan& plan) {
  const ConvProblem& p = plan.problem;
  const int64_t kg = p.k / p.groups, cg = p.c / p.groups;
  GroupSplits s;
  s.groups_split = plan.splits_g > 1;
  EXPECT_EQ(static_cast<int64_t>(plan.chunks.size()), plan.splits_g * plan.splits_n * plan.splits_k * plan.splits_c *
                                                           plan.splits_out[0] * plan.splits_out[1] *
                                                           plan.splits_out[2]);
  for (const ooc::Chunk& ch : plan.chunks) {
    const bool whole_groups = ch.k.begin % kg == 0 && ch.k.size() % kg == 0 && ch.c.begin % cg == 0 &&
                              ch.c.size() % cg == 0 && ch.k.begin / kg == ch.c.begin / cg &&
                              ch.k.size() / kg == ch.c.size() / cg;
    const bool inside_one = ch.k.begin / kg == (ch.k.end - 1) / kg && ch.c.begin / cg == (ch.c.end - 1) / cg &&
                            ch.k.begin / kg == ch.c.begin / cg;
    EXPECT_TRUE(whole_groups || inside_one) << "chunk k [" << ch.k.begin << ", " << ch.k.end << ") c [" << ch.c.begin
                                            << ", " << ch.c.end << ") mixes groups";
    for (int d = 0; d < p.spatial_dims; ++d)
      if (!p.symmetric_padding(d)) EXPECT_EQ(ch.compute_padding[d], 0) << "cuDNN asked to pad asymmetric dim " << d;
    if (ch.k.size() > kg) s.several_groups = true;
    if (ch.k.size() < kg) s.part_of_k = true;
    if (ch.c.size() < cg) s.part_of_c = true;
  }
  return s;
}

// Runs p on `backend` under `budget` with the given memory path; checks the result and the run.
void run_and_compare(const ConvProblem& p, ooc::BackendKind backend, size_t budget, unsigned seed, bool direct,
                     GroupSplits* seen) {
  SCOPED_TRACE(std::string("seed ") + std::to_string(seed) + ", " + p.describe() + ", memory_limit " +
               std::to_string(budget) + (direct ? ", host direct" : ""));
  std::mt19937 rng(seed);
  Tensors t;
  t.x = random_vector(static_cast<size_t>(p.x_elements()), rng);
  t.w = random_vector(static_cast<size_t>(p.w_elements()), rng);
  t.y = random_vector(static_cast<size_t>(p.y_elements()), rng);
  t.bias = random_vector(static_cast<size_t>(p.k), rng);
  const Tensors before = t;
  std::vector<float>& out = p.op == Operation::forward ? t.y : p.op == Operation::backward_data ? t.x : t.w;
  const std::vector<float> old =
      p.beta != 0.0 ? out : std::vector<float>(out.size(), std::numeric_limits<float>::quiet_NaN());
  out = old;
  const std::vector<double> ref = reference(p, t, old);  // reads the inputs only

  HostDirectAccess direct_access(direct);
  const ooc::Options o = options_for(backend, budget);
  ooc::Plan plan;
  ooc::RunStats stats;
  const bool ran = completes(ooc::operation_name(p.op), [&] {
    switch (p.op) {
      case Operation::forward: ooc::conv_forward(p, t.x.data(), t.w.data(), t.bias.data(), t.y.data(), o, &plan, &stats); break;
      case Operation::backward_data: ooc::conv_backward_data(p, t.y.data(), t.w.data(), t.x.data(), o, &plan, &stats); break;
      default: ooc::conv_backward_filter(p, t.x.data(), t.y.data(), t.w.data(), o, &plan, &stats); break;
    }
  });
  if (!ran) return;
  const Comparison c = compare(out, ref);
  EXPECT_EQ(c.non_finite, 0) << "elements not written (NaN), first at " << c.first_bad << "\n" << plan.describe();
  EXPECT_LT(c.relative_error, 1e-5) << plan.describe();
  if (p.op != Operation::forward) {
    EXPECT_EQ(t.y, before.y) << "dy was modified";
  }
  if (p.op != Operation::backward_data) {
    EXPECT_EQ(t.x, before.x) << "x was modified";
  }
  if (p.op != Operation::backward_filter) {
    EXPECT_EQ(t.w, before.w) << "w was modified";
  }
  EXPECT_LE(plan.peak_device_bytes, budget);
  EXPECT_EQ(stats.device_bytes_reserved, plan.peak_device_bytes);
  EXPECT_EQ(stats.chunks, static_cast<int64_t>(plan.num_chunks()));
  EXPECT_EQ(stats.bytes_d2h, plan.bytes_d2h);
  if (!direct && backend == ooc::BackendKind::host) {
    EXPECT_EQ(stats.bytes_h2d, plan.bytes_h2d) << plan.describe();
  }
  const GroupSplits s = check_group_ranges(plan);
  seen->several_groups |= s.several_groups;
  seen->part_of_k |= s.part_of_k;
  seen->part_of_c |= s.part_of_c;
  seen->groups_split |= s.groups_split;
}

class GroupedConv : public ::testing::TestWithParam<Operation> {};

// Every case under budgets from the tightest up, alpha/beta blending included, on the host
// backend with pageable and host-direct memory; across them every kind of channel split occurs.
TEST_P(GroupedConv, HostMatchesTheReferenceUnderEveryBudget) {
  const Operation op = GetParam();
  GroupSplits seen;
  unsigned salt = 0;
  for (const GroupedCase& c : grouped_cases())
    for (const auto& [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{-0.75, 1.25}}) {
      const ConvProblem p = problem_of(c, op, alpha, beta);
      const size_t needed = smallest_budget(p, ooc::BackendKind::host);
      for (double factor : {1.0, 1.7, 3.0, 1e6})
        for (bool direct : {false, true}) {
          run_and_compare(p, ooc::BackendKind::host, static_cast<size_t>(static_cast<double>(needed) * factor),
                          case_seed(c.name, ++salt), direct, &seen);
          if (HasFailure()) return;
        }
    }
  EXPECT_TRUE(seen.groups_split) << "no plan split the groups";
  EXPECT_TRUE(seen.several_groups) << "no chunk held several groups";
  EXPECT_TRUE(seen.part_of_k) << "no chunk split a group's output channels";
  if (op != Operation::backward_data) {
    EXPECT_TRUE(seen.part_of_c) << "no chunk split a group's input channels";
  }
}

// Groups are planned alike: with the groups split, group 1's chunks are group 0's shifted by one
// group's channels (same n, spatial and in-group k / c tiles), and the whole-group tiling of one
// group equals the ungrouped plan of that group alone.
TEST_P(GroupedConv, GroupsArePlannedAlike) {
  const Operation op = GetParam();
  const GroupedCase two{"two", {2, 16, 20}, {16, 8, 3}, {1}, {1}, {1}, 2};
  const ConvProblem p = problem_of(two, op, 1.0, 0.0);
  const ooc::Plan plan = plan_of(p, host_options(smallest_budget(p, ooc::BackendKind::host)));
  ASSERT_EQ(plan.splits_g, 2) << plan.describe();
  using Box = std::vector<int64_t>;
  std::set<Box> group0, group1;
  for (const ooc::Chunk& ch : plan.chunks) {
    const int64_t g = ch.k.begin / 8;
    const Box box{ch.n.begin, ch.n.end, ch.k.begin - 8 * g, ch.k.end - 8 * g, ch.c.begin - 8 * g, ch.c.end - 8 * g,
                  ch.out[0].begin, ch.out[0].end, ch.in[0].begin, ch.in[0].end};
    (g == 0 ? group0 : group1).insert(box);
  }
  EXPECT_EQ(group0, group1);
  const GroupedCase one{"one", {2, 8, 20}, {8, 8, 3}, {1}, {1}, {1}, 1};
  const ConvProblem q = problem_of(one, op, 1.0, 0.0);
  const ooc::Plan single = plan_of(q, host_options(plan.memory_limit));
  EXPECT_EQ(single.splits_k, plan.splits_k);
  EXPECT_EQ(single.splits_c, plan.splits_c);
  EXPECT_EQ(single.splits_n, plan.splits_n);
  EXPECT_EQ(single.splits_out, plan.splits_out);
}

INSTANTIATE_TEST_SUITE_P(Ops, GroupedConv,
                         ::testing::Values(Operation::forward, Operation::backward_data, Operation::backward_filter),
                         [](const auto& info) { return std::string(ooc::operation_name(info.param)); });

class GroupedConvCuda : public GpuTest<::testing::TestWithParam<Operation>> {};

// The same cases on the GPU (cuDNN's group count per chunk), pageable memory, tightest and loose.
TEST_P(GroupedConvCuda, MatchesTheReference) {
  const Operation op = GetParam();
  GroupSplits seen;
  unsigned salt = 100;
  for (const GroupedCase& c : grouped_cases()) {
    const ConvProblem p = problem_of(c, op, 1.0, 0.5);
    const size_t needed = smallest_budget(p, ooc::BackendKind::cuda);
    for (double factor : {1.0, 3.0, 1e6}) {
      run_and_compare(p, ooc::BackendKind::cuda, static_cast<size_t>(static_cast<double>(needed) * factor),
                      case_seed(c.name, ++salt), false, &seen);
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GroupedConvCuda,
                         ::testing::Values(Operation::forward, Operation::backward_data, Operation::backward_filter),
                         [](const auto& info) { return std::string(ooc::operation_name(info.param)); });

}  // namespace
