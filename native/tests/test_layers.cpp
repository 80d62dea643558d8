// Layers (layers.hpp) on the host backend: planner properties (chunks tile the tensor exactly once,
// never split a reduced axis, hold the budget) and numerics against float64 references, with
// budgets small enough to force every split kind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "backend_fixtures.hpp"
#include "ooc/layers.hpp"
#include "test_util.hpp"

namespace {

using ooc::ActivationMode;
using ooc::Options;
using ooc::Plan;
using ooc::SoftmaxMode;
using ooc_test::Shape;

using ooc_test::host_options;

// Every element of the tensor is in exactly one chunk.
void expect_tiles_once(const Plan& plan, const Shape& shape) {
  Shape e{1, 1, 1, 1, 1};
  std::copy(shape.begin(), shape.end(), e.begin());
  std::vector<int> seen(static_cast<size_t>(ooc_test::product(e)), 0);
  for (const ooc::Chunk& ch : plan.chunks)
    for (int64_t n = ch.n.begin; n < ch.n.end; ++n)
      for (int64_t c = ch.c.begin; c < ch.c.end; ++c)
        for (int64_t a = ch.in[0].begin; a < ch.in[0].end; ++a)
          for (int64_t b = ch.in[1].begin; b < ch.in[1].end; ++b)
            for (int64_t d = ch.in[2].begin; d < ch.in[2].end; ++d)
              ++seen[static_cast<size_t>((((n * e[1] + c) * e[2] + a) * e[3] + b) * e[4] + d)];
  for (int v : seen) ASSERT_EQ(v, 1);
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
}

TEST(LayerPlanner, ActivationSplitsOuterDimsFirstAndTilesOnce) {
  const Shape shape{3, 5, 7, 9};
  const Plan whole = ooc::plan_activation_forward(shape, host_options(1 << 20));
  EXPECT_EQ(whole.num_chunks(), 1u);
  const Plan split = ooc::plan_activation_forward(shape, host_options(4096));
  EXPECT_GT(split.num_chunks(), 3u);
  EXPECT_EQ(split.tiling.n, 1);
  expect_tiles_once(split, shape);
  expect_tiles_once(ooc::plan_activation_backward(shape, ooc::ActivationMode::elu, host_options(4096)), shape);
}

TEST(LayerPlanner, SoftmaxNeverSplitsTheReducedAxes) {
  const Shape shape{4, 6, 5, 7};
  const Plan channel = ooc::plan_softmax_forward(shape, SoftmaxMode::channel, host_options(3 * 2 * 512));
  EXPECT_EQ(channel.splits_c, 1);
  EXPECT_GT(channel.splits_out[0] * channel.splits_out[1], 1);
  expect_tiles_once(channel, shape);
  const Plan instance = ooc::plan_softmax_backward(shape, SoftmaxMode::instance, host_options(3 * 3 * 1024));
  EXPECT_EQ(instance.splits_c, 1);
  EXPECT_EQ(instance.splits_out[0], 1);
  EXPECT_EQ(instance.splits_out[1], 1);
  EXPECT_EQ(instance.splits_n, 4);
  expect_tiles_once(instance, shape);
  try {
    ooc::plan_softmax_forward({2, 64, 64, 64}, SoftmaxMode::instance, host_options(64 * 1024));
    FAIL() << "expected out_of_budget";
  } catch (const ooc::out_of_budget& e) {
    EXPECT_NE(std::string(e.what()).find("one instance"), std::string::npos) << e.what();
  }
}

TEST(LayerPlanner, AddTensorBroadcastBoxes) {
  const Plan plan = ooc::plan_add_tensor({1, 6, 1, 1}, {4, 6, 8, 8}, false, host_options(3 * 1024 * 3));
  EXPECT_GT(plan.num_chunks(), 1u);
  expect_tiles_once(plan, {4, 6, 8, 8});
  EXPECT_THROW(ooc::plan_add_tensor({2, 6, 1, 1}, {4, 6, 8, 8}, false, host_options(1 << 20)), ooc::invalid_argument);
}

TEST(LayerPlanner, BadModesListValidNames) {
  try {
    ooc::activation_mode_from_name("mish");
    FAIL();
  } catch (const ooc::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'swish'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ooc::softmax_mode_from_name("spatial"), ooc::invalid_argument);
}

double act(ActivationMode m, double coef, double x) {
  switch (m) {
    case ActivationMode::relu: return std::max(x, 0.0);
    case ActivationMode::sigmoid: return 1 / (1 + std::exp(-x));
    case ActivationMode::tanh: return std::tanh(x);
    case ActivationMode::clipped_relu: return std::min(std::max(x, 0.0), coef);
    case ActivationMode::elu: return x > 0 ? x : coef * (std::exp(x) - 1);
    case ActivationMode::swish: return x / (1 + std::exp(-coef * x));
    case ActivationMode::gelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case ActivationMode::leaky_relu: return x > 0 ? x : coef * x;
  }
  return 0;
}

TEST(LayerHost, ActivationForwardAndBackwardMatchFiniteDifferences) {
  std::mt19937 rng(7);
  const Shape shape{2, 3, 5, 7};
  const size_t count = static_cast<size_t>(ooc_test::product(shape));
  for (ActivationMode m : {ActivationMode::relu, ActivationMode::sigmoid, ActivationMode::tanh,
                           ActivationMode::clipped_relu, ActivationMode::elu, ActivationMode::swish,
                           ActivationMode::gelu, ActivationMode::leaky_relu}) {
    const double coef = m == ActivationMode::clipped_relu ? 0.5 : 1.3;
    std::vector<float> x = ooc_test::random_vector(count, rng), dy = ooc_test::random_vector(count, rng);
    std::vector<float> y(count, NAN), dx(count, NAN);
    ooc::activation_forward(shape, m, coef, x.data(), y.data(), host_options(2048));
    ooc::activation_backward(shape, m, coef, y.data(), dy.data(), x.data(), dx.data(), host_options(4096));
    for (size_t i = 0; i < count; ++i) {
      ASSERT_NEAR(y[i], act(m, coef, x[i]), 1e-6);
      const double h = 1e-5;
      const double grad = (act(m, coef, x[i] + h) - act(m, coef, x[i] - h)) / (2 * h);
      ASSERT_NEAR(dx[i], dy[i] * grad, 1e-4) << static_cast<int>(m) << " at x=" << x[i];
    }
  }
}

TEST(LayerHost, SoftmaxChannelSumsToOneUnderSplits) {
  std::mt19937 rng(3);
  const Shape shape{3, 4, 5, 6};
  const size_t count = static_cast<size_t>(ooc_test::product(shape));
  std::vector<float> x = ooc_test::random_vector(count, rng), y(count, NAN);
  Plan used;
  ooc::softmax_forward(shape, SoftmaxMode::channel, false, x.data(), y.data(), host_options(2048), &used);
  EXPECT_GT(used.num_chunks(), 3u);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t s = 0; s < 30; ++s) {
      double sum = 0;
      for (int64_t c = 0; c < 4; ++c) sum += y[static_cast<size_t>((n * 4 + c) * 30 + s)];
      ASSERT_NEAR(sum, 1.0, 1e-6);
    }
}

TEST(LayerHost, AddTensorBroadcastsAndWorksInPlace) {
  std::mt19937 rng(5);
  const Shape a_shape{1, 3, 1, 4}, c_shape{2, 3, 5, 4};
  std::vector<float> a = ooc_test::random_vector(12, rng), c = ooc_test::random_vector(120, rng);
  std::vector<float> out(120, NAN), c2 = c;
  ooc::add_tensor(a_shape, c_shape, 2.0, a.data(), 0.5, c.data(), out.data(), host_options(1024));
  ooc::add_tensor(a_shape, c_shape, 2.0, a.data(), 0.5, c2.data(), c2.data(), host_options(1024));
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 4; ++w) {
          const size_t i = static_cast<size_t>(((n * 3 + ch) * 5 + h) * 4 + w);
          const double ref = 2.0 * a[static_cast<size_t>(ch * 4 + w)] + 0.5 * c[i];
          ASSERT_NEAR(out[i], ref, 1e-6);
          ASSERT_NEAR(c2[i], ref, 1e-6);
        }
}

}  // namespace
