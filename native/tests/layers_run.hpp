// GEMM and batch-norm cases run end to end on one backend against float64 references; shared by
// the host and cuda tests (test_layers_host.cpp, test_layers_cuda.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "backend_fixtures.hpp"
#include "ooc/layers.hpp"
#include "test_util.hpp"

namespace ooc_layers_test {

using ooc::BackendKind;
using ooc::Operation;
using ooc::Plan;

using ooc_test::host_options;
using ooc_test::HostDirectAccess;

inline double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
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
inline void check_gemm_plan(const Plan& plan, int64_t M, int64_t N, int64_t K) {
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

inline ooc::Options with_limit(ooc::Options o, size_t limit) {
  o.memory_limit = limit;
  return o;
}

struct GemmCase {
  int64_t M, K, N;
  bool ta, tb, bias;
  double alpha, beta;
  size_t budget;
};

inline void run_gemm_case(const GemmCase& gc, const ooc::Options& options) {
  std::mt19937 rng(42);
  const auto a = ooc_test::random_vector(gc.M * gc.K, rng), b = ooc_test::random_vector(gc.K * gc.N, rng),
             bias = ooc_test::random_vector(gc.N, rng), c0 = ooc_test::random_vector(gc.M * gc.N, rng);
  const ooc::ConvProblem p = ooc::matmul_problem({gc.M, gc.K}, {gc.K, gc.N}, gc.alpha, gc.beta, gc.bias);
  std::vector<float> c = gc.beta != 0 ? c0 : std::vector<float>(gc.M * gc.N, std::nanf(""));
  Plan plan;
  ooc::matmul(p, gc.ta, gc.tb, a.data(), b.data(), gc.bias ? bias.data() : nullptr, c.data(), with_limit(options, gc.budget), &plan);
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

// Batch norm: float64 references.
struct BnCase {
  ooc_test::Shape x;
  size_t budget;
};

inline void bn_reference(const ooc_test::Shape& shape, const std::vector<float>& x, std::vector<double>& mean,
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

inline void run_bn_case(const BnCase& bc, const ooc::Options& options) {
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
                                  si.data(), with_limit(options, bc.budget), &plan);
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
                          scale.data(), sm.data(), si.data(), dx.data(), ds.data(), db.data(), with_limit(options, bc.budget), &plan);
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
                                   scale.data(), bias.data(), mf.data(), vf.data(), eps, yi.data(), with_limit(options, bc.budget),
                                   &plan);
  EXPECT_EQ(plan.passes, 1);
  EXPECT_LT(rel_error(yi, want_y), 1e-5);
}

}  // namespace ooc_layers_test
