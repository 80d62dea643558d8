// Batch norm over several devices (Options::devices): every device's statistics pass, one float64
// merge of every chunk's row in the whole plan's order, every device's apply pass. The result is
// the one device's bit for bit (each chunk computes exactly what it computes alone, and the merge
// order does not depend on the shares): training forward (y, the saved statistics, the running
// averages), its statistics-only form, backward (dx, dscale, dbias) and inference, on virtual
// host devices and on the one GPU listed twice. Cancelling stops every device's share.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend_fixtures.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc.hpp"
#include "test_util.hpp"

namespace {

using namespace ooc_test;
using ooc::Operation;

const std::vector<int64_t> kX{5, 6, 14, 12};

ooc::ConvProblem bn(Operation op) { return ooc::batchnorm_problem(op, kX); }

// 1.5x the smallest plan's budget: many chunks, uneven edges.
size_t tight_budget(ooc::BackendKind backend) {
  return needed_bytes_of(ooc::plan_batchnorm, bn(Operation::batchnorm_backward), backend) * 3 / 2;
}

std::vector<float> nans(size_t n) { return std::vector<float>(n, std::nanf("")); }

// Every output of the three batch-norm calls on inputs drawn from `seed`.
struct BnOutputs {
  std::vector<float> y, saved_mean, saved_invstd, running_mean, running_var;
  std::vector<float> stats_mean, stats_invstd;  // the statistics-only training call
  std::vector<float> dx, dscale, dbias, y_inference;
  size_t chunks = 0;
  int64_t chunks_run = 0;
};

BnOutputs run_all(const ooc::Options& options, unsigned seed) {
  std::mt19937 rng(seed);
  const size_t total = static_cast<size_t>(kX[0] * kX[1] * kX[2] * kX[3]), C = static_cast<size_t>(kX[1]);
  const auto x = random_vector(total, rng, 2.0), dy = random_vector(total, rng);
  const auto scale = random_vector(C, rng, 1.0), bias = random_vector(C, rng);
  const auto mean = random_vector(C, rng), var_base = random_vector(C, rng);
  std::vector<float> var(C);
  for (size_t c = 0; c < C; ++c) var[c] = 0.5f + std::abs(var_base[c]);
  BnOutputs o;
  o.y = nans(total), o.saved_mean = nans(C), o.saved_invstd = nans(C);
  o.running_mean = random_vector(C, rng), o.running_var = var;
  ooc::Plan plan;
  ooc::RunStats stats;
  ooc::batchnorm_forward_training(bn(Operation::batchnorm_forward_training), x.data(), scale.data(), bias.data(),
                                  1e-5, 0.1, o.running_mean.data(), o.running_var.data(), o.y.data(),
                                  o.saved_mean.data(), o.saved_invstd.data(), options, &plan, &stats);
  o.chunks = plan.num_chunks();
  o.chunks_run = stats.chunks;
  o.stats_mean = nans(C), o.stats_invstd = nans(C);
  ooc::batchnorm_forward_training(bn(Operation::batchnorm_forward_training), x.data(), scale.data(), bias.data(),
                                  1e-5, 0.1, nullptr, nullptr, nullptr, o.stats_mean.data(), o.stats_invstd.data(),
                                  options);
  o.dx = nans(total), o.dscale = nans(C), o.dbias = nans(C);
  ooc::batchnorm_backward(bn(Operation::batchnorm_backward), x.data(), dy.data(), scale.data(), o.saved_mean.data(),
                          o.saved_invstd.data(), o.dx.data(), o.dscale.data(), o.dbias.data(), options);
  o.y_inference = nans(total);
  ooc::batchnorm_forward_inference(bn(Operation::batchnorm_forward_inference), x.data(), scale.data(), bias.data(),
                                   mean.data(), var.data(), 1e-5, o.y_inference.data(), options);
  return o;
}

void expect_spread_equals_one_device(ooc::BackendKind backend, const std::vector<std::vector<int>>& device_lists) {
  const size_t budget = tight_budget(backend);
  const unsigned seed = case_seed("multi-device batch norm");
  const BnOutputs one = run_all(options_for(backend, budget), seed);
  for (const std::vector<int>& devices : device_lists) {
    SCOPED_TRACE(std::to_string(devices.size()) + " devices, seed " + std::to_string(seed));
    ooc::Options o = options_for(backend, budget);
    o.devices = devices;
    const BnOutputs spread = run_all(o, seed);
    ASSERT_GT(one.chunks, 2 * devices.size()) << "too few chunks to spread";
    EXPECT_EQ(spread.chunks_run, one.chunks_run);
    EXPECT_EQ(spread.y, one.y);
    EXPECT_EQ(spread.saved_mean, one.saved_mean);
    EXPECT_EQ(spread.saved_invstd, one.saved_invstd);
    EXPECT_EQ(spread.running_mean, one.running_mean);
    EXPECT_EQ(spread.running_var, one.running_var);
    EXPECT_EQ(spread.stats_mean, one.saved_mean) << "the statistics-only call computes the same statistics";
    EXPECT_EQ(spread.stats_invstd, one.saved_invstd);
    EXPECT_EQ(spread.dx, one.dx);
    EXPECT_EQ(spread.dscale, one.dscale);
    EXPECT_EQ(spread.dbias, one.dbias);
    EXPECT_EQ(spread.y_inference, one.y_inference);
  }
  for (float v : one.y) ASSERT_TRUE(std::isfinite(v)) << "the one-device run wrote every element";
  for (float v : one.dx) ASSERT_TRUE(std::isfinite(v));
}

TEST(MultiDeviceBatchnorm, VirtualHostDevicesGiveTheOneDeviceResultsBitForBit) {
  expect_spread_equals_one_device(ooc::BackendKind::host, {{0, 1}, {0, 1, 2}, {2, 0, 0}, {3, 1, 4, 1, 5}});
}

// Cancelled before its first chunk: every share stops, the call throws, and the devices serve the
// next call.
TEST(MultiDeviceBatchnorm, CancellingStopsEveryShare) {
  ooc::Options o = host_options(tight_budget(ooc::BackendKind::host));
  o.devices = {0, 1, 2};
  std::atomic<bool> cancel{true};
  ooc::CallObserver observer;
  observer.cancel = &cancel;
  o.observer = &observer;
  EXPECT_THROW(run_all(o, 3), ooc::cancelled);
  o.observer = nullptr;
  EXPECT_NO_THROW(run_all(o, 3));
}

class MultiDeviceBatchnormCuda : public GpuTest<> {};

TEST_F(MultiDeviceBatchnormCuda, TheSameGpuListedTwice) {
  expect_spread_equals_one_device(ooc::BackendKind::cuda, {{0, 0}, {0, 0, 0}});
}

TEST_F(MultiDeviceBatchnormCuda, TwoGpus) {
  if (ooc::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  expect_spread_equals_one_device(ooc::BackendKind::cuda, {{0, 1}, {1, 0}});
}

}  // namespace
