// One call over several devices (Options::devices): the shares a plan is cut into
// (plan/device_shares.hpp), and the four convolution operations spread over virtual host devices
// (and over the GPU listed twice, where one is present) against the same call on one device:
// forward and backward data bit for bit (each output tile is computed by one device exactly as
// before), the reductions over every chunk (dw, db) split into partial sums within float32
// rounding, the caller's beta applied once; cancellation stops every device's share.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend_fixtures.hpp"
#include "backward_plan_checks.hpp"
#include "conv_run.hpp"
#include "ooc/ooc.hpp"
#include "plan/device_shares.hpp"
#include "test_util.hpp"

namespace {

using namespace ooc_test;
using ooc::ConvProblem;
using ooc::Operation;

// A forward convolution and its gradients, small enough for the host backend, planned under a
// budget that cuts them into many chunks. The reductions over every chunk get a geometry whose dw
// (and db) stays one tile: many samples and rows, few filters.
const Shape kX{3, 4, 20, 18}, kW{6, 4, 3, 3};
const Shape kReducedX{8, 2, 30, 26}, kReducedW{3, 2, 3, 3};

ConvProblem problem(Operation op, double alpha = 1.0, double beta = 0.0) {
  const bool reduced = op == Operation::backward_filter || op == Operation::backward_bias;
  BackwardSpec spec = backward_spec(op == Operation::forward ? Operation::backward_data : op, reduced ? kReducedX : kX,
                                    reduced ? kReducedW : kW, {1}, {1}, {1}, alpha, beta);
  if (op != Operation::forward) return spec.problem();
  return ConvProblem::forward(kX, kW, {1}, {1}, {1}, 1, alpha, beta, true);
}

ooc::Plan plan_of(const ConvProblem& p, const ooc::Options& o) {
  switch (p.op) {
    case Operation::forward: return ooc::plan_conv_forward(p, o);
    case Operation::backward_data: return ooc::plan_conv_backward_data(p, o);
    case Operation::backward_filter: return ooc::plan_conv_backward_filter(p, o);
    default: return ooc::plan_conv_backward_bias(p, o);
  }
}

// A budget that splits p into several chunks: 1.3x its smallest plan, or for the reductions 6x
// (the smallest plan of those also cuts dw into tiles; a larger one keeps it whole).
size_t tight_budget(const ConvProblem& p, ooc::BackendKind backend) {
  const bool reduced = p.op == Operation::backward_filter || p.op == Operation::backward_bias;
  return static_cast<size_t>((reduced ? 6.0 : 1.3) * static_cast<double>(needed_bytes_of(plan_of, p, backend)));
}

// A share's chunks, in order, are the plan's; whole-group shares begin and end reduction groups.
TEST(DeviceShares, CoverThePlanInOrderAndLoadWhatTheyStream) {
  bool saw_split = false, saw_whole_groups = false;  // both kinds of share occur below
  for (Operation op : {Operation::forward, Operation::backward_data, Operation::backward_filter,
                       Operation::backward_bias}) {
    const ConvProblem p = problem(op);
    const ooc::Plan plan = plan_of(p, host_options(tight_budget(p, ooc::BackendKind::host)));
    ASSERT_GT(plan.num_chunks(), 3u) << plan.describe();
    for (int devices : {1, 2, 3, 7, 1000})
      for (bool can_split : {false, true}) {
        SCOPED_TRACE(std::string(ooc::operation_name(op)) + ", " + std::to_string(devices) + " devices");
        const std::vector<ooc::DeviceShare> shares = ooc::device_shares(plan, devices, can_split);
        ASSERT_FALSE(shares.empty());
        EXPECT_LE(shares.size(), static_cast<size_t>(devices));
        size_t next = 0, groups = 0;
        for (const ooc::Chunk& ch : plan.chunks) groups += ch.last_c;
        const bool split = groups == 1 && can_split && devices > 1;
        saw_split |= split;
        saw_whole_groups |= groups > 1 && devices > 1 && shares.size() > 1;
        for (size_t s = 0; s < shares.size(); ++s) {
          const ooc::Plan& share = shares[s].plan;
          ASSERT_FALSE(share.chunks.empty());
          EXPECT_EQ(share.peak_device_bytes, plan.peak_device_bytes);
          EXPECT_EQ(shares[s].partial, split && s > 0);
          EXPECT_EQ(share.problem.beta, shares[s].partial ? 0.0 : p.beta);
          const ooc::Chunk& first = share.chunks.front();
          EXPECT_TRUE(first.load_x && first.load_w) << "the device holds nothing yet";
          EXPECT_EQ(first.load_y, op != Operation::forward);
          EXPECT_TRUE(first.first_c);
          EXPECT_TRUE(share.chunks.back().last_c);
          for (size_t i = 0; i < share.chunks.size(); ++i, ++next) {
            const ooc::Chunk& mine = share.chunks[i];
            const ooc::Chunk& theirs = plan.chunks[next];
            EXPECT_EQ(mine.n, theirs.n);
            EXPECT_EQ(mine.k, theirs.k);
            EXPECT_EQ(mine.c, theirs.c);
            EXPECT_EQ(mine.out, theirs.out);
            if (i > 0) {
              EXPECT_EQ(mine.load_x, theirs.load_x);
              EXPECT_EQ(mine.load_w, theirs.load_w);
            }
            if (!split) {
              EXPECT_EQ(mine.first_c, theirs.first_c);
              EXPECT_EQ(mine.last_c, theirs.last_c);
            }
          }
        }
        EXPECT_EQ(next, plan.num_chunks());
        if (!split) EXPECT_EQ(shares.size(), std::min<size_t>(static_cast<size_t>(devices), groups));
      }
  }
  EXPECT_TRUE(saw_split) << "no plan had one reduction group to split";
  EXPECT_TRUE(saw_whole_groups) << "no plan was cut into whole groups";
}

// Balanced: no share of whole groups holds more than its even part plus one group's chunks.
TEST(DeviceShares, WholeGroupsAreBalancedByChunkCount) {
  const ConvProblem p = problem(Operation::forward);
  const ooc::Plan plan = plan_of(p, host_options(tight_budget(p, ooc::BackendKind::host)));
  size_t largest_group = 0, run = 0;
  for (const ooc::Chunk& ch : plan.chunks) {
    ++run;
    if (ch.last_c) largest_group = std::max(largest_group, run), run = 0;
  }
  for (int devices : {2, 3, 4}) {
    const auto shares = ooc::device_shares(plan, devices, false);
    for (const auto& s : shares)
      EXPECT_LE(s.plan.num_chunks(), plan.num_chunks() / shares.size() + largest_group) << devices << " devices";
  }
}

// A device the cost model finds slower gets fewer chunks: about its speed's part of them, within
// one reduction group (whole groups) or one chunk (the one group split); equal models, equal speeds.
TEST(DeviceShares, ASlowerDeviceGetsFewerChunks) {
  // Links slow enough for these small plans' bytes to outweigh their per-chunk overhead, as a
  // large problem's do on a real link.
  ooc::MachineModel fast;
  fast.h2d_bytes_per_s = fast.d2h_bytes_per_s = fast.bidir_bytes_per_s = 3e7;
  fast.flops_per_s = 5e13;
  fast.chunk_overhead_s = 1e-6;
  ooc::MachineModel slow = fast;
  slow.h2d_bytes_per_s = slow.d2h_bytes_per_s = slow.bidir_bytes_per_s = 1e7;  // a third of the link
  bool saw_split = false, saw_whole_groups = false;
  for (Operation op : {Operation::forward, Operation::backward_data, Operation::backward_filter}) {
    SCOPED_TRACE(ooc::operation_name(op));
    const ConvProblem p = problem(op);
    const ooc::Plan plan = plan_of(p, host_options(tight_budget(p, ooc::BackendKind::host)));
    const std::vector<double> equal = ooc::device_speeds(plan, {fast, fast, fast});
    EXPECT_EQ(equal[0], equal[1]);
    EXPECT_EQ(equal[1], equal[2]);
    const std::vector<double> speeds = ooc::device_speeds(plan, {slow, fast, slow});
    ASSERT_GT(speeds[1], 2.0 * speeds[0]) << "the link decides an out-of-core plan's time";
    EXPECT_EQ(speeds[0], speeds[2]);
    size_t largest_group = 0, run = 0, groups = 0;
    for (const ooc::Chunk& ch : plan.chunks) {
      ++run;
      if (ch.last_c) largest_group = std::max(largest_group, run), run = 0, ++groups;
    }
    const auto shares = ooc::device_shares(plan, speeds, true);
    ASSERT_EQ(shares.size(), 3u);
    const bool split = groups == 1;
    (split ? saw_split : saw_whole_groups) = true;
    const double total = speeds[0] + speeds[1] + speeds[2];
    const double slack = split ? 1.0 : static_cast<double>(largest_group);
    size_t covered = 0;
    for (size_t s = 0; s < shares.size(); ++s) {
      const double ideal = static_cast<double>(plan.num_chunks()) * speeds[s] / total;
      EXPECT_NEAR(static_cast<double>(shares[s].plan.num_chunks()), ideal, slack + 1.0) << "share " << s;
      covered += shares[s].plan.num_chunks();
    }
    EXPECT_EQ(covered, plan.num_chunks());
    EXPECT_GT(shares[1].plan.num_chunks(), shares[0].plan.num_chunks());
    EXPECT_GT(shares[1].plan.num_chunks(), shares[2].plan.num_chunks());
  }
  EXPECT_TRUE(saw_split && saw_whole_groups);
}

// Weights that are not speeds are a bug in the caller, not a share of nothing.
TEST(DeviceShares, RefuseWeightsThatAreNotPositive) {
  const ConvProblem p = problem(Operation::forward);
  const ooc::Plan plan = plan_of(p, host_options(tight_budget(p, ooc::BackendKind::host)));
  EXPECT_THROW(ooc::device_shares(plan, std::vector<double>{1.0, 0.0}, false), std::logic_error);
  EXPECT_THROW(ooc::device_shares(plan, std::vector<double>{1.0, std::nan("")}, false), std::logic_error);
  EXPECT_THROW(ooc::device_shares(plan, std::vector<double>{}, false), std::logic_error);
}

struct Outputs {
  std::vector<float> out;
  ooc::Plan plan;
  ooc::RunStats stats;
};

// Runs p with `options` on fresh inputs drawn from `seed`; the output starts as `seed`'s old values.
Outputs run(const ConvProblem& p, const ooc::Options& options, unsigned seed) {
  std::mt19937 rng(seed);
  const std::vector<float> x = random_vector(static_cast<size_t>(p.x_elements()), rng);
  const std::vector<float> w = random_vector(static_cast<size_t>(p.w_elements()), rng);
  const std::vector<float> dy = random_vector(static_cast<size_t>(p.y_elements()), rng);
  const std::vector<float> bias = random_vector(static_cast<size_t>(p.k), rng);
  Outputs o;
  const size_t count = static_cast<size_t>(p.op == Operation::forward         ? p.y_elements()
                                           : p.op == Operation::backward_data ? p.x_elements()
                                           : p.op == Operation::backward_filter ? p.w_elements()
                                                                                : p.k);
  o.out = random_vector(count, rng);
  switch (p.op) {
    case Operation::forward:
      ooc::conv_forward(p, x.data(), w.data(), bias.data(), o.out.data(), options, &o.plan, &o.stats);
      break;
    case Operation::backward_data:
      ooc::conv_backward_data(p, dy.data(), w.data(), o.out.data(), options, &o.plan, &o.stats);
      break;
    case Operation::backward_filter:
      ooc::conv_backward_filter(p, x.data(), dy.data(), o.out.data(), options, &o.plan, &o.stats);
      break;
    default:
      ooc::conv_backward_bias(p, dy.data(), o.out.data(), options, &o.plan, &o.stats);
      break;
  }
  return o;
}

void expect_spread_equals_one_device(ooc::BackendKind backend, const std::vector<std::vector<int>>& device_lists) {
  unsigned salt = 0;
  for (Operation op : {Operation::forward, Operation::backward_data, Operation::backward_filter,
                       Operation::backward_bias}) {
    const ConvProblem p = problem(op, 0.75, 0.5);
    const size_t budget = tight_budget(p, backend);
    const unsigned seed = test_seed(++salt);
    const Outputs one = run(p, options_for(backend, budget), seed);
    for (const std::vector<int>& devices : device_lists) {
      SCOPED_TRACE(std::string(ooc::operation_name(op)) + " on " + std::to_string(devices.size()) +
                   " devices, seed " + std::to_string(seed));
      ooc::Options o = options_for(backend, budget);
      o.devices = devices;
      const Outputs spread = run(p, o, seed);
      EXPECT_EQ(spread.stats.chunks, static_cast<int64_t>(one.plan.num_chunks()));
      EXPECT_LE(spread.stats.device_bytes_reserved, budget);
      if (op == Operation::forward || op == Operation::backward_data) {
        EXPECT_EQ(spread.out, one.out) << "each output tile is one device's, computed as on one device";
      } else {
        std::vector<double> ref(one.out.begin(), one.out.end());
        const Comparison c = compare(spread.out, ref);
        EXPECT_EQ(c.non_finite, 0);
        EXPECT_LT(c.relative_error, 1e-5) << "partial sums add up to the one device's sum";
      }
    }
  }
}

TEST(MultiDevice, VirtualHostDevicesGiveTheOneDeviceResults) {
  expect_spread_equals_one_device(ooc::BackendKind::host, {{0, 1}, {0, 1, 2}, {2, 0, 0}, {3, 1, 4, 1, 5, 9, 2}});
}

TEST(MultiDevice, BadDevicesAreRefusedNamingThem) {
  const ConvProblem p = problem(Operation::forward);
  ooc::Options o = host_options(0);
  o.devices = {0, 64};
  try {
    run(p, o, 1);
    ADD_FAILURE() << "device 64 was accepted";
  } catch (const ooc::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("device 64"), std::string::npos) << e.what();
  }
}

// Cancelling stops every share: the call throws cancelled, and the backends serve the next call.
TEST(MultiDevice, CancellingStopsEveryShare) {
  const ConvProblem p = problem(Operation::backward_filter);
  ooc::Options o = host_options(tight_budget(p, ooc::BackendKind::host));
  o.devices = {0, 1, 2};
  std::atomic<bool> cancel{true};
  ooc::CallObserver observer;
  observer.cancel = &cancel;
  o.observer = &observer;
  EXPECT_THROW(run(p, o, 2), ooc::cancelled);
  o.observer = nullptr;
  EXPECT_NO_THROW(run(p, o, 2));
}

class MultiDeviceCuda : public GpuTest<> {};

// The one GPU listed twice: two pipelines on it, the same results as one.
TEST_F(MultiDeviceCuda, TheSameGpuListedTwice) {
  expect_spread_equals_one_device(ooc::BackendKind::cuda, {{0, 0}});
}

// The multi-GPU kind: two GPUs in either order (and one of them twice beside the other).
TEST_F(MultiDeviceCuda, TwoGpus) {
  if (ooc::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  expect_spread_equals_one_device(ooc::BackendKind::cuda, {{0, 1}, {1, 0}, {0, 1, 1}});
}

}  // namespace
