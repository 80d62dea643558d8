// ooc_cublasSgemm without a GPU: argument checks and cuBLAS status codes, and column-major SGEMM
// with every transpose pair, padded leading dimensions and alpha/beta on the host backend against
// a float64 reference, under budgets that split it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "capi_fixtures.hpp"
#include "capi_references.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cublas.h"

namespace {

using namespace ooc_test;

const cublasHandle_t kHandle = dummy_handle<cublasHandle_t>();

class CapiGemmArgs : public HostBackendTest {
 protected:
  std::vector<float> a = std::vector<float>(64, 1.0f), b = a, c = a;
  float one = 1.0f, zero = 0.0f;

  cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc) {
    return ooc_cublasSgemm(kHandle, ta, tb, m, n, k, &one, a.data(), lda, b.data(), ldb, &zero, c.data(), ldc);
  }
};

TEST_F(CapiGemmArgs, NullHandleIsNotInitialized) {
  EXPECT_EQ(ooc_cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data(), 4, b.data(), 4, &zero, c.data(),
                            4),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_TRUE(names_argument(last_error(), "handle")) << last_error();
}

TEST_F(CapiGemmArgs, BadArgumentsAreInvalidValueAndNamed) {
  EXPECT_EQ(gemm(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 4, 4, 4), CUBLAS_STATUS_SUCCESS) << last_error();
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(gemm(CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, 4, 4, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(static_cast<cublasOperation_t>(7), CUBLAS_OP_N, 4, 4, 4, 4, 4, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "transa")) << last_error();
  EXPECT_EQ(gemm(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 2, 3, 2, 4), CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  EXPECT_TRUE(names_argument(last_error(), "lda")) << last_error();
  EXPECT_EQ(gemm(CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 2, 3, 2, 4), CUBLAS_STATUS_SUCCESS) << last_error();  // lda >= k
  EXPECT_EQ(gemm(CUBLAS_OP_N, CUBLAS_OP_T, 4, 4, 2, 4, 3, 4), CUBLAS_STATUS_INVALID_VALUE);  // ldb < n
  EXPECT_TRUE(names_argument(last_error(), "ldb")) << last_error();
  EXPECT_EQ(gemm(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 2, 4, 2, 3), CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  EXPECT_TRUE(names_argument(last_error(), "ldc")) << last_error();
  EXPECT_EQ(ooc_cublasSgemm(kHandle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, nullptr, 4, b.data(), 4, &zero, c.data(),
                            4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "A")) << last_error();
  EXPECT_EQ(ooc_cublasSgemm(kHandle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, nullptr, a.data(), 4, b.data(), 4, &zero,
                            c.data(), 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(names_argument(last_error(), "alpha")) << last_error();
}

TEST_F(CapiGemmArgs, EmptyProductsDoNothingOrScaleC) {
  // m or n 0: nothing is read or written, not even the matrices' pointers.
  EXPECT_EQ(ooc_cublasSgemm(kHandle, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 4, &one, nullptr, 1, nullptr, 4, &zero, nullptr, 1),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  // k 0: C = beta * C, A and B unread; beta 0 writes zeros over NaN.
  std::vector<float> cm{1, 2, 3, 4, 5, 6};
  const float half = 0.5f;
  ASSERT_EQ(ooc_cublasSgemm(kHandle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 0, &one, nullptr, 2, nullptr, 1, &half, cm.data(),
                            3),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  EXPECT_EQ(cm, (std::vector<float>{0.5f, 1, 3, 2, 2.5f, 6}));  // ldc 3: the third row untouched
  std::vector<float> poisoned(4, std::nanf(""));
  ASSERT_EQ(ooc_cublasSgemm(kHandle, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 0, &one, nullptr, 1, nullptr, 1, &zero,
                            poisoned.data(), 2),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(poisoned, std::vector<float>(4, 0.0f));
}

TEST_F(CapiGemmArgs, ImpossibleBudgetIsAllocFailed) {
  oocSetMemoryLimit(1);
  EXPECT_EQ(gemm(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 4, 4, 4), CUBLAS_STATUS_ALLOC_FAILED);
  EXPECT_NE(last_error().find("memory_limit"), std::string::npos) << last_error();
}

struct GemmCase {
  cublasOperation_t ta, tb;
  int pad;  // extra rows in each leading dimension
  float alpha, beta;
};

void PrintTo(const GemmCase& g, std::ostream* os) {
  *os << "op " << g.ta << g.tb << " pad " << g.pad << " alpha " << g.alpha << " beta " << g.beta;
}

class CapiGemmHost : public HostBackendTest, public ::testing::WithParamInterface<GemmCase> {};

TEST_P(CapiGemmHost, MatchesColumnMajorReference) {
  const GemmCase& gc = GetParam();
  const int m = 37, n = 29, k = 23;
  const bool ta = gc.ta != CUBLAS_OP_N, tb = gc.tb != CUBLAS_OP_N;
  const int lda = (ta ? k : m) + gc.pad, ldb = (tb ? n : k) + gc.pad, ldc = m + gc.pad;
  std::mt19937 rng(test_seed(41));
  const auto A = random_vector(static_cast<size_t>(lda) * (ta ? m : k), rng);
  const auto B = random_vector(static_cast<size_t>(ldb) * (tb ? k : n), rng);
  // C's padding rows hold values that must survive; its m rows are NaN when beta == 0 (never read).
  std::vector<float> c_old = random_vector(static_cast<size_t>(ldc) * n, rng);
  if (gc.beta == 0.0f)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) c_old[static_cast<size_t>(j) * ldc + i] = std::nanf("");
  std::vector<float> C = c_old;
  oocSetMemoryLimit(split_budget([&](const ooc::Options& o) {
    return ooc::plan_matmul(ooc::matmul_problem({n, k}, {k, m}, gc.alpha, gc.beta, false), o);
  }));
  ASSERT_EQ(ooc_cublasSgemm(kHandle, gc.ta, gc.tb, m, n, k, &gc.alpha, A.data(), lda, B.data(), ldb, &gc.beta,
                            C.data(), ldc),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  expect_close(C, sgemm_ref(ta, tb, m, n, k, gc.alpha, A, lda, B, ldb, gc.beta, c_old, ldc), "C");
  expect_split_run("sgemm");
}

INSTANTIATE_TEST_SUITE_P(Cases, CapiGemmHost,
                         ::testing::Values(GemmCase{CUBLAS_OP_N, CUBLAS_OP_N, 0, 1.0f, 0.0f},
                                           GemmCase{CUBLAS_OP_T, CUBLAS_OP_N, 3, 1.5f, 0.5f},
                                           GemmCase{CUBLAS_OP_N, CUBLAS_OP_T, 2, -0.5f, 0.0f},
                                           GemmCase{CUBLAS_OP_T, CUBLAS_OP_T, 0, 1.0f, 1.0f},
                                           GemmCase{CUBLAS_OP_C, CUBLAS_OP_N, 5, 2.0f, -1.0f},
                                           GemmCase{CUBLAS_OP_N, CUBLAS_OP_C, 1, 1.0f, 0.25f}));

}  // namespace
