// GEMM and batch norm (layers.hpp) on the host backend: planner properties (tiles cover the
// output exactly once, K-split accumulation flags, budget held, two-pass batch norm) and numerics
// against float64 references under budgets that force every split.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "ooc/layers.hpp"
#include "test_util.hpp"

namespace {

using ooc::BackendKind;
using ooc::Operation;
using ooc::Plan;

ooc::Options host(size_t limit) {
  ooc::Options o;
  o.backend = BackendKind::host;
  o.memory_limit = limit;
  return o;
}

class HostDirectAccess {
 public:
  explicit HostDirectAccess(bool enabled) { ooc::testing::set_host_direct_access(enabled); }
  ~HostDirectAccess() { ooc::testing::set_host_direct_access(false); }
};

double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Every (m, n) element is produced by exactly one chain of chunks over K, first..last, each K
// index once; the plan fits its budget.
void check_gemm_plan(const Plan& plan, int64_t M, int64_t N, int64_t K) {
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  std::map<std::pair<int64_t, int64_t>, int64_t> next_k;  // (m tile begin, n tile begin) -> next K index
  std::vector<int> covered(static_cast<size_t>(M * N), 0);
  for (const auto& ch : plan.chunks) {
    auto key = std::make_pair(ch.n.begin, ch.k.begin);
    const int64_t expect = next_k.count(key) ? next_k[key] : 0;
    ASSERT_EQ(ch.c.begin, expect);
    EXPECT_EQ(ch.first_c, ch.c.begin == 0);
    EXPECT_EQ(ch.last_c, ch.c.end == K);
    next_k[key] = ch.c.end;
    if (ch.last_c)
      for (int64_t m = ch.n.begin; m < ch.n.end; ++m)
        for (int64_t n = ch.k.begin; n < ch.k.end; ++n) ++covered[m * N + n];
  }
  for (int v : covered) ASSERT_EQ(v, 1);
}

struct GemmCase {
  int64_t M, K, N;
  bool ta, tb, bias;
  double alpha, beta;
  size_t budget;
};

class HostGemm : public ::testing::TestWithParam<std::tuple<GemmCase, bool>> {};

TEST_P(HostGemm, MatchesFloat64Reference) {
  const GemmCase gc = std::get<0>(GetParam());
  const HostDirectAccess mode(std::get<1>(GetParam()));
  std::mt19937 rng(42);
  const auto a = ooc_test::random_vector(gc.M * gc.K, rng), b = ooc_test::random_vector(gc.K * gc.N, rng),
             bias = ooc_test::random_vector(gc.N, rng), c0 = ooc_test::random_vector(gc.M * gc.N, rng);
  const ooc::ConvProblem p = ooc::matmul_problem({gc.M, gc.K}, {gc.K, gc.N}, gc.alpha, gc.beta, gc.bias);
  std::vector<float> c = gc.beta != 0 ? c0 : std::vector<float>(gc.M * gc.N, std::nanf(""));
  Plan plan;
  ooc::matmul(p, gc.ta, gc.tb, a.data(), b.data(), gc.bias ? bias.data() : nullptr, c.data(), host(gc.budget), &plan);
  check_gemm_plan(plan, gc.M, gc.N, gc.K);
  std::vector<double> want(gc.M * gc.N);
  for (int64_t i = 0; i < gc.M; ++i)
    for (int64_t j = 0; j < gc.N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < gc.K; ++k)
        s += static_cast<double>(gc.ta ? a[k * gc.M + i] : a[i * gc.K + k]) *
             (gc.tb ? b[j * gc.K + k] : b[k * gc.N + j]);
      want[i * gc.N + j] = gc.alpha * s + gc.beta * c0[i * gc.N + j] + (gc.bias ? bias[j] : 0.0);
    }
  EXPECT_LT(rel_error(c, want), 1e-5) << plan.describe();
}

INSTANTIATE_TEST_SUITE_P(
    Splits, HostGemm,
    ::testing::Combine(::testing::Values(GemmCase{7, 5, 9, false, false, false, 1.0, 0.0, 0},
                                         GemmCase{37, 29, 23, false, false, true, 1.0, 0.0, 4096},
                                         GemmCase{37, 29, 23, true, false, false, 0.5, 0.0, 3072},
                                         GemmCase{37, 29, 23, false, true, true, 1.0, 1.0, 3072},
                                         GemmCase{64, 300, 17, true, true, false, 2.0, -0.5, 2048},
                                         GemmCase{1, 1000, 1, false, false, true, 1.0, 0.0, 2048}),
                       ::testing::Bool()));

TEST(GemmPlanner, TinyBudgetSplitsEveryDimensionAndAccumulatesOverK) {
  const ooc::ConvProblem p = ooc::matmul_problem({200, 300}, {300, 100}, 1.0, 0.0, false);
  const Plan plan = ooc::plan_matmul(p, host(3 * 3 * 256 * 2));
  EXPECT_GT(plan.splits_n * plan.splits_k * plan.splits_c, 8);
  EXPECT_GT(plan.splits_c, 1);
  check_gemm_plan(plan, 200, 100, 300);
  EXPECT_EQ(plan.problem.op, Operation::matmul);
}

TEST(GemmPlanner, WholeProblemIsOneChunkWhenItFits) {
  const ooc::ConvProblem p = ooc::matmul_problem({20, 30}, {30, 10}, 1.0, 0.0, true);
  const Plan plan = ooc::plan_matmul(p, host(1 << 20));
  EXPECT_EQ(plan.num_chunks(), 1u);
}

TEST(GemmPlanner, ImpossibleBudgetAndBadShapes) {
  const ooc::ConvProblem p = ooc::matmul_problem({20, 30}, {30, 10}, 1.0, 0.0, false);
  EXPECT_THROW(ooc::plan_matmul(p, host(256)), ooc::out_of_budget);
  try {
    ooc::matmul_problem({2, 3}, {4, 5}, 1.0, 0.0, false);
    FAIL();
  } catch (const ooc::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  }
}

// Batch norm: float64 references.
struct BnCase {
  ooc_test::Shape x;
  size_t budget;
};

void bn_reference(const ooc_test::Shape& shape, const std::vector<float>& x, std::vector<double>& mean,
                  std::vector<double>& var) {
  const int64_t N = shape[0], C = shape[1], S = ooc_test::product(shape) / (N * C);
  mean.assign(C, 0);
  var.assign(C, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) mean[c] += x[(n * C + c) * S + s];
  for (auto& m : mean) m /= static_cast<double>(N * S);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) var[c] += std::pow(x[(n * C + c) * S + s] - mean[c], 2);
  for (auto& v : var) v /= static_cast<double>(N * S);
}

class HostBatchnorm : public ::testing::TestWithParam<std::tuple<BnCase, bool>> {};

TEST_P(HostBatchnorm, TrainingAndBackwardMatchFloat64) {
  const BnCase bc = std::get<0>(GetParam());
  const HostDirectAccess mode(std::get<1>(GetParam()));
  const int64_t N = bc.x[0], C = bc.x[1], S = ooc_test::product(bc.x) / (N * C), total = N * C * S;
  std::mt19937 rng(7);
  const auto x = ooc_test::random_vector(total, rng, 3.0), dy = ooc_test::random_vector(total, rng);
  const auto scale = ooc_test::random_vector(C, rng, 1.0), bias = ooc_test::random_vector(C, rng);
  std::vector<double> mean, var;
  bn_reference(bc.x, x, mean, var);
  const double eps = 1e-5;

  std::vector<float> y(total, std::nanf("")), sm(C, std::nanf("")), si(C, std::nanf(""));
  std::vector<float> rm(C, 0.5f), rv(C, 2.0f);
  Plan plan;
  ooc::batchnorm_forward_training(ooc::batchnorm_problem(Operation::batchnorm_forward_training, bc.x), x.data(),
                                  scale.data(), bias.data(), eps, 0.1, rm.data(), rv.data(), y.data(), sm.data(),
                                  si.data(), host(bc.budget), &plan);
  EXPECT_EQ(plan.passes, 2);
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  std::vector<double> want_y(total);
  for (int64_t i = 0; i < total; ++i) {
    const int64_t c = (i / S) % C;
    want_y[i] = (x[i] - mean[c]) / std::sqrt(var[c] + eps) * scale[c] + bias[c];
  }
  EXPECT_LT(rel_error(y, want_y), 1e-5) << plan.describe();
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(sm[c], mean[c], 1e-5 * std::abs(mean[c]) + 1e-6);
    EXPECT_NEAR(si[c], 1 / std::sqrt(var[c] + eps), 1e-5 / std::sqrt(var[c] + eps));
    const double n = static_cast<double>(N * S);
    EXPECT_NEAR(rm[c], 0.9 * 0.5 + 0.1 * mean[c], 1e-5);
    EXPECT_NEAR(rv[c], 0.9 * 2.0 + 0.1 * var[c] * n / (n - 1), 1e-5);
  }

  std::vector<float> dx(total, std::nanf("")), ds(C, std::nanf("")), db(C, std::nanf(""));
  ooc::batchnorm_backward(ooc::batchnorm_problem(Operation::batchnorm_backward, bc.x), x.data(), dy.data(),
                          scale.data(), sm.data(), si.data(), dx.data(), ds.data(), db.data(), host(bc.budget), &plan);
  EXPECT_EQ(plan.passes, 2);
  std::vector<double> sdy(C, 0), sdyx(C, 0), want_dx(total);
  for (int64_t i = 0; i < total; ++i) {
    const int64_t c = (i / S) % C;
    sdy[c] += dy[i];
    sdyx[c] += dy[i] * (x[i] - sm[c]) * si[c];
  }
  const double n = static_cast<double>(N * S);
  for (int64_t i = 0; i < total; ++i) {
    const int64_t c = (i / S) % C;
    const double xhat = (x[i] - sm[c]) * si[c];
    want_dx[i] = scale[c] * si[c] * (dy[i] - sdy[c] / n - xhat * sdyx[c] / n);
  }
  EXPECT_LT(rel_error(dx, want_dx), 1e-5) << plan.describe();
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(db[c], sdy[c], 1e-4 * (1 + std::abs(sdy[c])));
    EXPECT_NEAR(ds[c], sdyx[c], 1e-4 * (1 + std::abs(sdyx[c])));
  }

  std::vector<float> yi(total, std::nanf(""));
  std::vector<float> mf(mean.begin(), mean.end()), vf(var.begin(), var.end());
  ooc::batchnorm_forward_inference(ooc::batchnorm_problem(Operation::batchnorm_forward_inference, bc.x), x.data(),
                                   scale.data(), bias.data(), mf.data(), vf.data(), eps, yi.data(), host(bc.budget),
                                   &plan);
  EXPECT_EQ(plan.passes, 1);
  EXPECT_LT(rel_error(yi, want_y), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Splits, HostBatchnorm,
                         ::testing::Combine(::testing::Values(BnCase{{8, 3, 5, 7}, 0}, BnCase{{8, 3, 5, 7}, 4096},
                                                              BnCase{{5, 4, 3, 4, 6}, 2048}, BnCase{{9, 6}, 1024},
                                                              BnCase{{2, 3, 1000}, 3072}, BnCase{{1, 2, 3, 97}, 2048}),
                                            ::testing::Bool()));

TEST(BatchnormPlanner, TilesCoverXOnceAndHoldTheBudget) {
  const ooc_test::Shape shape{6, 5, 7, 9};
  const Plan plan = ooc::plan_batchnorm(ooc::batchnorm_problem(Operation::batchnorm_backward, shape), host(4096));
  EXPECT_EQ(plan.passes, 2);
  EXPECT_GT(plan.num_chunks(), 4u);
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  std::vector<int> covered(6 * 5 * 7 * 9, 0);
  int64_t index = 0;
  for (const auto& ch : plan.chunks) {
    EXPECT_EQ(ch.k.begin, index++);
    for (int64_t n = ch.n.begin; n < ch.n.end; ++n)
      for (int64_t c = ch.c.begin; c < ch.c.end; ++c)
        for (int64_t h = ch.in[0].begin; h < ch.in[0].end; ++h)
          for (int64_t w = ch.in[1].begin; w < ch.in[1].end; ++w) ++covered[((n * 5 + c) * 7 + h) * 9 + w];
  }
  for (int v : covered) ASSERT_EQ(v, 1);
  EXPECT_NE(plan.describe().find("2 passes"), std::string::npos) << plan.describe();
}

TEST(BatchnormApi, BadArguments) {
  EXPECT_THROW(ooc::batchnorm_problem(Operation::batchnorm_backward, {3}), ooc::invalid_argument);
  EXPECT_THROW(ooc::batchnorm_problem(Operation::matmul, {3, 4}), ooc::invalid_argument);
  const auto p = ooc::batchnorm_problem(Operation::batchnorm_forward_inference, {2, 2});
  std::vector<float> v(4, 1.0f);
  EXPECT_THROW(ooc::batchnorm_forward_inference(p, v.data(), v.data(), v.data(), v.data(), v.data(), 0.0, v.data(),
                                                host(0)),
               ooc::invalid_argument);
  const auto t = ooc::batchnorm_problem(Operation::batchnorm_forward_training, {1, 2});
  EXPECT_THROW(ooc::batchnorm_forward_training(t, v.data(), v.data(), v.data(), 1e-5, 0.1, nullptr, nullptr, v.data(),
                                               v.data(), v.data(), host(0)),
               ooc::invalid_argument);
}

}  // namespace
