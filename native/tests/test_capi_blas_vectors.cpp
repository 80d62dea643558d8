// The cuBLAS level-1/2 look-alikes without a GPU: argument checks and statuses, and every call
// against a float64 reference on the host backend, with unit, strided and negative increments
// (gemv: both transpositions, a padded leading dimension, beta == 0 never reading y).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "capi_fixtures.hpp"
#include "conv_run.hpp"
#include "ooc/ooc_cublas.h"

namespace {

using namespace ooc_test;

const cublasHandle_t kHandle = dummy_handle<cublasHandle_t>();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Element i of an n-vector stored with increment inc (cuBLAS: inc < 0 counts from the end).
int64_t at(int64_t i, int64_t n, int inc) { return inc > 0 ? i * inc : (n - 1 - i) * -inc; }
size_t storage(int64_t n, int inc) { return static_cast<size_t>((n - 1) * std::abs(inc) + 1); }

class CapiBlasVectors : public HostBackendTest {
 protected:
  std::mt19937 rng{test_seed(61)};
  std::vector<float> vec(int64_t n, int inc) { return random_vector(storage(n, inc), rng); }
  float alpha = 1.75f;
};

TEST_F(CapiBlasVectors, NullHandleIsNotInitialized) {
  float v[4] = {}, r = 0;
  EXPECT_EQ(ooc_cublasSaxpy(nullptr, 4, &alpha, v, 1, v, 1), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_TRUE(names_argument(last_error(), "handle")) << last_error();
  EXPECT_EQ(ooc_cublasSscal(nullptr, 4, &alpha, v, 1), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(ooc_cublasScopy(nullptr, 4, v, 1, v, 1), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(ooc_cublasSdot(nullptr, 4, v, 1, v, 1, &r), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(ooc_cublasSnrm2(nullptr, 4, v, 1, &r), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(ooc_cublasSgemv(nullptr, CUBLAS_OP_N, 2, 2, &alpha, v, 2, v, 1, &alpha, v, 1),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(CapiBlasVectors, BadArgumentsAreInvalidValueAndNamed) {
  std::vector<float> x(16, 1.0f), y(16, 1.0f);
  float r = 0;
  EXPECT_EQ(ooc_cublasSaxpy(kHandle, 4, &alpha, x.data(), 0, y.data(), 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "incx")) << last_error();
  EXPECT_EQ(ooc_cublasSaxpy(kHandle, 4, &alpha, x.data(), 1, y.data(), 0), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "incy")) << last_error();
  EXPECT_EQ(ooc_cublasSaxpy(kHandle, 4, nullptr, x.data(), 1, y.data(), 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "alpha")) << last_error();
  EXPECT_EQ(ooc_cublasSscal(kHandle, 4, &alpha, nullptr, 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "x")) << last_error();
  EXPECT_EQ(ooc_cublasScopy(kHandle, 4, x.data(), 1, nullptr, 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "y")) << last_error();
  EXPECT_EQ(ooc_cublasSdot(kHandle, 4, x.data(), 1, y.data(), 1, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "result")) << last_error();
  EXPECT_EQ(ooc_cublasSnrm2(kHandle, 4, x.data(), -0, &r), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(ooc_cublasSgemv(kHandle, static_cast<cublasOperation_t>(9), 2, 2, &alpha, x.data(), 2, x.data(), 1,
                            &alpha, y.data(), 1),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "trans")) << last_error();
  EXPECT_EQ(ooc_cublasSgemv(kHandle, CUBLAS_OP_N, 4, 2, &alpha, x.data(), 3, x.data(), 1, &alpha, y.data(), 1),
            CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  EXPECT_TRUE(names_argument(last_error(), "lda")) << last_error();
  EXPECT_EQ(ooc_cublasSgemv(kHandle, CUBLAS_OP_N, -1, 2, &alpha, x.data(), 3, x.data(), 1, &alpha, y.data(), 1),
            CUBLAS_STATUS_INVALID_VALUE);
  // Negative increments out of core: not served (cuBLAS itself serves them on the device).
  EXPECT_EQ(ooc_cublasSgemv(kHandle, CUBLAS_OP_N, 2, 2, &alpha, x.data(), 2, x.data(), -1, &alpha, y.data(), 1),
            CUBLAS_STATUS_NOT_SUPPORTED);
  for (float v : x) EXPECT_EQ(v, 1.0f);  // nothing written by a refused call
  for (float v : y) EXPECT_EQ(v, 1.0f);
}

TEST_F(CapiBlasVectors, EmptyVectorsDoNothing) {
  float y = 3.0f, r = 7.0f;
  EXPECT_EQ(ooc_cublasSaxpy(kHandle, 0, &alpha, nullptr, 1, &y, 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ooc_cublasSscal(kHandle, -3, &alpha, &y, 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(y, 3.0f);
  EXPECT_EQ(ooc_cublasSdot(kHandle, 0, nullptr, 1, nullptr, 1, &r), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(r, 0.0f);
  r = 7.0f;
  EXPECT_EQ(ooc_cublasSnrm2(kHandle, 0, nullptr, 1, &r), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(r, 0.0f);
}

TEST_F(CapiBlasVectors, Level1MatchesReferences) {
  const int64_t n = 1000;
  for (const auto& [incx, incy] : {std::pair{1, 1}, {2, 3}, {-1, 1}, {3, -2}}) {
    SCOPED_TRACE("incx " + std::to_string(incx) + ", incy " + std::to_string(incy));
    const std::vector<float> x = vec(n, incx), y0 = vec(n, incy);

    std::vector<float> y = y0;
    ASSERT_EQ(ooc_cublasSaxpy(kHandle, n, &alpha, x.data(), incx, y.data(), incy), CUBLAS_STATUS_SUCCESS)
        << last_error();
    std::vector<double> want(y0.begin(), y0.end());
    for (int64_t i = 0; i < n; ++i) want[at(i, n, incy)] += double{alpha} * x[at(i, n, incx)];
    expect_close(y, want, "axpy");

    std::vector<float> s = x;
    ASSERT_EQ(ooc_cublasSscal(kHandle, n, &alpha, s.data(), incx), CUBLAS_STATUS_SUCCESS) << last_error();
    std::vector<double> scaled(x.begin(), x.end());
    for (int64_t i = 0; i < n; ++i) scaled[at(i, n, incx)] *= alpha;
    expect_close(s, scaled, "scal");

    std::vector<float> c(y0.size(), kNaN);
    ASSERT_EQ(ooc_cublasScopy(kHandle, n, x.data(), incx, c.data(), incy), CUBLAS_STATUS_SUCCESS) << last_error();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(c[at(i, n, incy)], x[at(i, n, incx)]);
    if (std::abs(incy) > 1) {
      EXPECT_TRUE(std::isnan(c[1]));  // between the elements: untouched
    }

    float dot = kNaN, norm = kNaN;
    ASSERT_EQ(ooc_cublasSdot(kHandle, n, x.data(), incx, y0.data(), incy, &dot), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(ooc_cublasSnrm2(kHandle, n, x.data(), incx, &norm), CUBLAS_STATUS_SUCCESS);
    double want_dot = 0, want_sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      want_dot += double{x[at(i, n, incx)]} * y0[at(i, n, incy)];
      want_sq += double{x[at(i, n, incx)]} * x[at(i, n, incx)];
    }
    EXPECT_NEAR(dot, want_dot, 1e-5 * std::sqrt(want_sq) * n);
    EXPECT_NEAR(norm, std::sqrt(want_sq), 1e-5 * std::sqrt(want_sq));
  }
  oocPlanInfo_t info{};
  ASSERT_EQ(oocGetLastPlanInfo(&info), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(info.outOfCore, 1);
  EXPECT_NE(last_plan().find("cublasSnrm2"), std::string::npos) << last_plan();
}

TEST_F(CapiBlasVectors, Nrm2DoesNotOverflowWhereTheNormFits) {
  const std::vector<float> x(64, 1e30f);  // squares overflow float32; the norm, 8e30, does not
  float norm = 0;
  ASSERT_EQ(ooc_cublasSnrm2(kHandle, 64, x.data(), 1, &norm), CUBLAS_STATUS_SUCCESS);
  EXPECT_FLOAT_EQ(norm, 8e30f);
}

TEST_F(CapiBlasVectors, GemvMatchesReference) {
  const int m = 67, n = 53, lda = 71;  // A: 15 KiB, four times the budget
  const std::vector<float> A = random_vector(static_cast<size_t>(lda) * n, rng);
  oocSetMemoryLimit(4096);  // the GEMM the call becomes runs in several chunks
  for (cublasOperation_t trans : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (const auto& [incx, incy, beta] : {std::tuple{1, 1, 0.0f}, {2, 3, 0.5f}, {1, 2, 1.0f}}) {
      SCOPED_TRACE("trans " + std::to_string(trans) + ", incx " + std::to_string(incx) + ", incy " +
                   std::to_string(incy) + ", beta " + std::to_string(beta));
      const bool t = trans != CUBLAS_OP_N;
      const int rows = t ? n : m, cols = t ? m : n;
      const std::vector<float> x = vec(cols, incx);
      std::vector<float> y = beta == 0.0f ? std::vector<float>(storage(rows, incy), kNaN) : vec(rows, incy);
      const std::vector<float> y0 = y;
      ASSERT_EQ(ooc_cublasSgemv(kHandle, trans, m, n, &alpha, A.data(), lda, x.data(), incx, &beta, y.data(), incy),
                CUBLAS_STATUS_SUCCESS)
          << last_error();
      std::vector<float> got;
      std::vector<double> want;
      for (int64_t i = 0; i < rows; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < cols; ++j) sum += double{t ? A[i * lda + j] : A[j * lda + i]} * x[at(j, cols, incx)];
        want.push_back(alpha * sum + (beta == 0.0f ? 0.0 : double{beta} * y0[at(i, rows, incy)]));
        got.push_back(y[at(i, rows, incy)]);
      }
      expect_close(got, want, "gemv");
      if (incy > 1) {
        EXPECT_EQ(std::isnan(y[1]), std::isnan(y0[1]));  // between y's elements: untouched
      }
      expect_split_run("gemv");
    }
  }
}

}  // namespace

namespace {

TEST_F(CapiBlasVectors, TotalsAddUpEveryCallOfTheProcess) {
  EXPECT_EQ(oocGetTotals(nullptr), CUDNN_STATUS_BAD_PARAM);
  oocResetTotals();
  oocTotals_t t{};
  ASSERT_EQ(oocGetTotals(&t), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(t.calls, 0);
  const int m = 67, n = 53;
  const std::vector<float> A = random_vector(static_cast<size_t>(m) * n, rng), x = vec(n, 1);
  std::vector<float> y(m, 0.0f);
  const float zero = 0.0f;
  oocSetMemoryLimit(4096);
  ASSERT_EQ(ooc_cublasSgemv(kHandle, CUBLAS_OP_N, m, n, &alpha, A.data(), m, x.data(), 1, &zero, y.data(), 1),
            CUBLAS_STATUS_SUCCESS);
  oocPlanInfo_t gemv{};
  ASSERT_EQ(oocGetLastPlanInfo(&gemv), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(ooc_cublasSscal(kHandle, m, &alpha, y.data(), 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ooc_cublasSscal(kHandle, m, &alpha, y.data(), 0), CUBLAS_STATUS_INVALID_VALUE);  // not counted
  ASSERT_EQ(oocGetTotals(&t), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(t.calls, 2);
  EXPECT_EQ(t.outOfCoreCalls, 2);
  EXPECT_GE(t.chunks, gemv.chunks);
  EXPECT_GE(t.bytesH2D, gemv.bytesH2D);
  EXPECT_GT(t.bytesH2D, static_cast<size_t>(m) * n * sizeof(float) - 1);  // A crossed at least once
  oocResetTotals();
  ASSERT_EQ(oocGetTotals(&t), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(t.calls, 0);
  EXPECT_EQ(t.bytesH2D, 0u);
}

}  // namespace
