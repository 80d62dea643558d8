// Cancellation and progress of a run (CallObserver, ooc/types.hpp) on the host backend, for every
// operation family: a convolution, a layer, a fused function and batch norm's two passes; and the
// C API's oocCancel. A cancelled call throws ooc::cancelled at the report where it was asked to
// stop, issues no chunk after it (the NaN-poisoned output keeps untouched elements), and the next
// call runs normally and gives the uninterrupted result.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "backend_fixtures.hpp"
#include "capi_fixtures.hpp"
#include "ooc/fused.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc.hpp"
#include "ooc/pool_activation_softmax.hpp"
#include "test_util.hpp"

namespace {

using ooc_test::host_options;

// Records every report; returns false (cancel) from the first report with done >= stop_at.
struct Recorder {
  std::vector<ooc::ChunkProgress> reports;
  int64_t stop_at = -1;
  std::atomic<bool>* set_flag_at_stop = nullptr;  // instead of returning false, set this flag
  static bool on_chunk(void* context, const ooc::ChunkProgress* p) {
    auto* r = static_cast<Recorder*>(context);
    r->reports.push_back(*p);
    if (r->stop_at < 0 || p->done < r->stop_at) return true;
    if (r->set_flag_at_stop) {
      r->set_flag_at_stop->store(true);
      return true;
    }
    return false;
  }
  ooc::CallObserver observer(const std::atomic<bool>* cancel = nullptr) {
    ooc::CallObserver o;
    o.cancel = cancel;
    o.on_chunk = &on_chunk;
    o.context = this;
    return o;
  }
};

// One operation run into `out` with options (the observer varies); returns the plan it ran.
using Run = std::function<ooc::Plan(std::vector<float>& out, const ooc::Options& options)>;

std::vector<float> nan_vector(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

size_t count_nan(const std::vector<float>& v) {
  size_t n = 0;
  for (float f : v) n += std::isnan(f);
  return n;
}

void expect_monotone_from_zero(const std::vector<ooc::ChunkProgress>& reports, int64_t total) {
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.front().done, 0);
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].total, total);
    EXPECT_LE(reports[i].done, total);
    if (i) {
      EXPECT_GE(reports[i].done, reports[i - 1].done) << "report " << i;
    }
  }
}

// The checks every family shares: an observed full run reports 0..total (total: chunks times
// passes) and matches an unobserved run; a run cancelled at `stop_at` throws there, leaves part of
// the output unwritten, and the next run gives the full result again.
void check_cancel_and_progress(const Run& run, size_t out_elements, size_t memory_limit, int64_t stop_at) {
  const ooc::Options plain = host_options(memory_limit);
  std::vector<float> expected = nan_vector(out_elements);
  const ooc::Plan plan = run(expected, plain);
  const int64_t total = static_cast<int64_t>(plan.num_chunks()) * plan.passes;
  ASSERT_GT(total, stop_at + 2) << "the budget must give enough chunks";
  ASSERT_EQ(count_nan(expected), 0u);

  {  // progress of a full run
    Recorder r;
    const ooc::CallObserver o = r.observer();
    ooc::Options observed = plain;
    observed.observer = &o;
    std::vector<float> out = nan_vector(out_elements);
    run(out, observed);
    expect_monotone_from_zero(r.reports, total);
    EXPECT_EQ(r.reports.back().done, total);
    EXPECT_DOUBLE_EQ(r.reports.back().predicted_seconds, plan.predicted_seconds);
    EXPECT_EQ(out, expected);
  }
  {  // cancelled by the callback at stop_at
    Recorder r;
    r.stop_at = stop_at;
    const ooc::CallObserver o = r.observer();
    ooc::Options observed = plain;
    observed.observer = &o;
    std::vector<float> out = nan_vector(out_elements);
    EXPECT_THROW(run(out, observed), ooc::cancelled);
    expect_monotone_from_zero(r.reports, total);
    EXPECT_EQ(r.reports.back().done, stop_at) << "no report after the one that cancelled";
    EXPECT_GT(count_nan(out), 0u) << "chunks after the cancel were not run";
  }
  {  // cancelled by the flag, set from a report (the next report throws)
    std::atomic<bool> flag{false};
    Recorder r;
    r.stop_at = stop_at;
    r.set_flag_at_stop = &flag;
    const ooc::CallObserver o = r.observer(&flag);
    ooc::Options observed = plain;
    observed.observer = &o;
    std::vector<float> out = nan_vector(out_elements);
    EXPECT_THROW(run(out, observed), ooc::cancelled);
    EXPECT_EQ(r.reports.back().done, stop_at);
  }
  std::vector<float> again = nan_vector(out_elements);
  run(again, plain);
  EXPECT_EQ(again, expected) << "the call after a cancelled one";
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  return ooc_test::random_vector(n, rng);
}

TEST(Cancel, ConvForward) {
  const ooc::ConvProblem p = ooc::ConvProblem::forward({4, 3, 32, 32}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1.0,
                                                       0.0, true);
  const std::vector<float> x = random_floats(p.x_elements(), 1), w = random_floats(p.w_elements(), 2),
                           b = random_floats(p.k, 3);
  check_cancel_and_progress(
      [&](std::vector<float>& y, const ooc::Options& o) {
        ooc::Plan plan;
        ooc::conv_forward(p, x.data(), w.data(), b.data(), y.data(), o, &plan);
        return plan;
      },
      p.y_elements(), 12 * 1024, 3);
}

// Caller memory treated as pinned: every copy by DMA, no staging (the path a GPU call with pinned
// arrays takes, and the one the pacer bounds).
TEST(Cancel, ConvForwardDirectAccess) {
  const ooc_test::HostDirectAccess direct(true);
  const ooc::ConvProblem p = ooc::ConvProblem::forward({4, 3, 32, 32}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1.0,
                                                       0.0, false);
  const std::vector<float> x = random_floats(p.x_elements(), 15), w = random_floats(p.w_elements(), 16);
  check_cancel_and_progress(
      [&](std::vector<float>& y, const ooc::Options& o) {
        ooc::Plan plan;
        ooc::conv_forward(p, x.data(), w.data(), nullptr, y.data(), o, &plan);
        return plan;
      },
      p.y_elements(), 12 * 1024, 5);
}

TEST(Cancel, ActivationLayer) {
  const std::vector<int64_t> shape{8, 16, 512};
  const std::vector<float> x = random_floats(8 * 16 * 512, 4);
  check_cancel_and_progress(
      [&](std::vector<float>& y, const ooc::Options& o) {
        ooc::Plan plan;
        ooc::activation_forward(shape, ooc::ActivationMode::tanh, 0.0, x.data(), y.data(), o, &plan);
        return plan;
      },
      x.size(), 16 * 1024, 4);
}

TEST(Cancel, FusedConvBiasActivation) {
  const ooc::ConvProblem p = ooc::ConvProblem::forward({4, 3, 32, 32}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1.0,
                                                       0.0, true);
  const std::vector<float> x = random_floats(p.x_elements(), 5), w = random_floats(p.w_elements(), 6),
                           b = random_floats(p.k, 7);
  const ooc::FusedActivation relu{};
  check_cancel_and_progress(
      [&](std::vector<float>& y, const ooc::Options& o) {
        ooc::Plan plan;
        ooc::conv_bias_activation_forward(p, relu, x.data(), w.data(), nullptr, b.data(), y.data(), o, &plan);
        return plan;
      },
      p.y_elements(), 12 * 1024, 2);
}

// Batch norm runs its chunks twice (statistics, then normalize): cancelled in the second pass.
TEST(Cancel, BatchNormTrainingInItsSecondPass) {
  const ooc::ConvProblem p = ooc::batchnorm_problem(ooc::Operation::batchnorm_forward_training, {8, 3, 16, 16});
  const size_t n = static_cast<size_t>(8 * 3 * 16 * 16);
  const std::vector<float> x = random_floats(n, 8), scale = random_floats(3, 9), bias = random_floats(3, 10);
  const ooc::Plan probe = ooc::plan_batchnorm(p, host_options(8 * 1024));
  ASSERT_EQ(probe.passes, 2);
  std::vector<float> mean(3), invstd(3);
  check_cancel_and_progress(
      [&](std::vector<float>& y, const ooc::Options& o) {
        ooc::Plan plan;
        ooc::batchnorm_forward_training(p, x.data(), scale.data(), bias.data(), 1e-5, 0.1, nullptr, nullptr, y.data(),
                                        mean.data(), invstd.data(), o, &plan);
        return plan;
      },
      n, 8 * 1024, static_cast<int64_t>(probe.num_chunks()) + 1);
}

// A token set before the call: nothing runs, the output is untouched.
TEST(Cancel, AlreadyCancelledCallRunsNoChunk) {
  const std::vector<int64_t> shape{4, 4, 64};
  const std::vector<float> x = random_floats(4 * 4 * 64, 11);
  std::vector<float> y = nan_vector(x.size());
  std::atomic<bool> flag{true};
  ooc::CallObserver o;
  o.cancel = &flag;
  ooc::Options options = host_options(4096);
  options.observer = &o;
  EXPECT_THROW(ooc::activation_forward(shape, ooc::ActivationMode::relu, 0.0, x.data(), y.data(), options),
               ooc::cancelled);
  EXPECT_EQ(count_nan(y), y.size());
}

// From another thread while the call runs (each report sleeps, so the call outlasts the wait).
TEST(Cancel, FromAnotherThread) {
  const std::vector<int64_t> shape{8, 16, 512};
  const std::vector<float> x = random_floats(8 * 16 * 512, 12);
  std::vector<float> y = nan_vector(x.size());
  std::atomic<bool> flag{false};
  std::atomic<int64_t> reports{0};
  struct Slow {
    std::atomic<int64_t>* reports;
    static bool on_chunk(void* c, const ooc::ChunkProgress*) {
      ++*static_cast<Slow*>(c)->reports;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return true;
    }
  } slow{&reports};
  ooc::CallObserver o;
  o.cancel = &flag;
  o.on_chunk = &Slow::on_chunk;
  o.context = &slow;
  ooc::Options options = host_options(16 * 1024);
  options.observer = &o;
  ASSERT_GT(ooc::plan_activation_forward(shape, options).num_chunks(), 20u);
  std::thread canceller([&] {
    while (reports < 3) std::this_thread::yield();
    flag = true;
  });
  EXPECT_THROW(ooc::activation_forward(shape, ooc::ActivationMode::relu, 0.0, x.data(), y.data(), options),
               ooc::cancelled);
  canceller.join();
  EXPECT_GT(count_nan(y), 0u);
}

// The C API: oocCancel from another thread stops the call running on the handle with
// OOC_STATUS_CANCELLED; with no call running it does nothing; the handle's next call succeeds.
class CapiCancel : public ooc_test::HostBackendTest {};

TEST_F(CapiCancel, OocCancelStopsTheRunningCall) {
  const cudnnHandle_t handle = ooc_test::dummy_handle();
  // Large enough (~0.2 s on the host backend) that the cancelling thread is scheduled while the call
  // runs even on a loaded machine: a cancel before the call starts does nothing, by design.
  ooc_test::ConvDescriptors d{{4, 16, 96, 96}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}};
  const std::vector<float> x = random_floats(d.problem.x_elements(), 13), w = random_floats(d.problem.w_elements(), 14);
  std::vector<float> y = nan_vector(d.problem.y_elements());
  const float one = 1.0f, zero = 0.0f;
  oocSetMemoryLimit(16 * 1024);
  auto forward = [&] {
    return ooc_cudnnConvolutionForward(handle, &one, d.x.get(), x.data(), d.w.get(), w.data(), d.conv.get(),
                                       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d.y.get(),
                                       y.data());
  };
  EXPECT_EQ(oocCancel(handle), CUDNN_STATUS_SUCCESS) << "nothing running: nothing to do";
  EXPECT_EQ(oocCancel(nullptr), CUDNN_STATUS_BAD_PARAM);

  std::atomic<bool> done{false};
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string error;
  std::thread call([&] {
    status = forward();
    error = ooc_test::last_error();
    done = true;
  });
  while (!done) {
    EXPECT_EQ(oocCancel(handle), CUDNN_STATUS_SUCCESS);
    std::this_thread::yield();
  }
  call.join();
  EXPECT_EQ(status, OOC_STATUS_CANCELLED);
  EXPECT_EQ(status / 1000 * 1000, CUDNN_STATUS_EXECUTION_FAILED) << "cuDNN's category of the status";
  EXPECT_NE(error.find("cancelled"), std::string::npos) << error;
  EXPECT_GT(count_nan(y), 0u);

  EXPECT_EQ(forward(), CUDNN_STATUS_SUCCESS) << ooc_test::last_error();
  EXPECT_EQ(count_nan(y), 0u);
}

}  // namespace
