// ooc_cublasGemmEx: float16, bfloat16 and float32 column-major GEMMs on the host backend against
// float64 references of the (exactly upcast) half inputs, under budgets that split K; k == 0 scales
// a half C; mixed and unserved types and compute types are CUBLAS_STATUS_NOT_SUPPORTED naming the
// argument. On a GPU (skipped without one): out of core from pageable memory, and cuBLAS' own call
// for device-resident operands.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/host/host_elements.hpp"
#include "capi_fixtures.hpp"
#include "capi_gpu_fixtures.hpp"
#include "capi_references.hpp"
#include "conv_run.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cublas.h"

namespace {

using namespace ooc_test;

const cublasHandle_t kHandle = dummy_handle<cublasHandle_t>();

// `values` rounded to `dtype` (bits) and the rounded values as float32.
struct Rounded {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

Rounded rounded(ooc::DType dtype, const std::vector<float>& values) {
  Rounded r{std::vector<uint16_t>(values.size()), std::vector<float>(values.size())};
  const auto n = static_cast<int64_t>(values.size());
  ooc::host_elements::convert(ooc::DType::float32, values.data(), dtype, r.bits.data(), n);
  ooc::host_elements::convert(dtype, r.bits.data(), ooc::DType::float32, r.values.data(), n);
  return r;
}

struct HalfCase {
  cudaDataType_t type;
  ooc::DType dtype;
  double tolerance;  // of the norm: fp16 1e-3, bf16 1e-2
};

class CapiGemmExHalf : public HostBackendTest, public ::testing::WithParamInterface<HalfCase> {};

TEST_P(CapiGemmExHalf, MatchesColumnMajorReferenceUnderASplitK) {
  const HalfCase& hc = GetParam();
  const int m = 37, n = 29, k = 301, lda = m + 2, ldb = n, ldc = m + 1;  // A as is, B transposed
  std::mt19937 rng(test_seed(43));
  const Rounded A = rounded(hc.dtype, random_vector(static_cast<size_t>(lda) * k, rng));
  const Rounded B = rounded(hc.dtype, random_vector(static_cast<size_t>(ldb) * k, rng));
  const Rounded c_old = rounded(hc.dtype, random_vector(static_cast<size_t>(ldc) * n, rng));
  std::vector<uint16_t> C = c_old.bits;
  const float alpha = 1.5f, beta = -0.5f;
  oocSetMemoryLimit(split_budget([&](const ooc::Options& o) {
    return ooc::plan_matmul(ooc::matmul_problem({n, k}, {k, m}, alpha, beta, false, hc.dtype), o);
  }));
  ASSERT_EQ(ooc_cublasGemmEx(kHandle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, A.bits.data(), hc.type, lda,
                             B.bits.data(), hc.type, ldb, &beta, C.data(), hc.type, ldc, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  expect_split_run("gemm_ex");
  const std::vector<double> want =
      sgemm_ref(false, true, m, n, k, alpha, A.values, lda, B.values, ldb, beta, c_old.values, ldc);
  std::vector<float> got(C.size());
  ooc::host_elements::convert(hc.dtype, C.data(), ooc::DType::float32, got.data(), static_cast<int64_t>(C.size()));
  const Comparison c = compare(got, want);
  EXPECT_EQ(c.non_finite, 0);
  EXPECT_LE(c.relative_error, hc.tolerance);
  for (int j = 0; j < n; ++j) EXPECT_EQ(C[static_cast<size_t>(j) * ldc + m], c_old.bits[static_cast<size_t>(j) * ldc + m])
      << "C's padding row, column " << j;
}

TEST_P(CapiGemmExHalf, KZeroScalesAHalfC) {
  const HalfCase& hc = GetParam();
  const Rounded c = rounded(hc.dtype, {1, 2, 3, 4});
  std::vector<uint16_t> C = c.bits;
  const float alpha = 1.0f, beta = 0.5f;
  ASSERT_EQ(ooc_cublasGemmEx(kHandle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 0, &alpha, nullptr, hc.type, 2, nullptr,
                             hc.type, 1, &beta, C.data(), hc.type, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  EXPECT_EQ(C, rounded(hc.dtype, {0.5f, 1, 1.5f, 2}).bits);
}

INSTANTIATE_TEST_SUITE_P(Types, CapiGemmExHalf,
                         ::testing::Values(HalfCase{CUDA_R_16F, ooc::DType::float16, 1e-3},
                                           HalfCase{CUDA_R_16BF, ooc::DType::bfloat16, 1e-2}));

TEST_F(HostBackendTest, GemmExOfFloat32IsSgemm) {
  const int m = 7, n = 5, k = 9;
  std::mt19937 rng(test_seed(44));
  const auto A = random_vector(static_cast<size_t>(m) * k, rng), B = random_vector(static_cast<size_t>(k) * n, rng);
  std::vector<float> C(static_cast<size_t>(m) * n, std::nanf(""));
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(ooc_cublasGemmEx(kHandle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A.data(), CUDA_R_32F, m, B.data(),
                             CUDA_R_32F, k, &zero, C.data(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  expect_close(C, sgemm_ref(false, false, m, n, k, 1.0, A, m, B, k, 0.0, C, m), "C");
}

TEST_F(HostBackendTest, GemmExRefusesTypesItDoesNotServeByName) {
  std::vector<float> a(16, 1.0f), b = a, c = a;
  const float one = 1.0f, zero = 0.0f;
  auto call = [&](cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct, cublasComputeType_t compute) {
    return ooc_cublasGemmEx(kHandle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data(), at, 4, b.data(), bt, 4, &zero,
                            c.data(), ct, 4, compute, CUBLAS_GEMM_DEFAULT);
  };
  EXPECT_EQ(call(CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "Ctype")) << last_error();
  EXPECT_EQ(call(CUDA_R_16F, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "Btype")) << last_error();
  EXPECT_EQ(call(CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "Atype")) << last_error();
  EXPECT_EQ(call(CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_TRUE(names_argument(last_error(), "computeType")) << last_error();
  EXPECT_EQ(ooc_cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data(), CUDA_R_32F, 4, b.data(),
                             CUDA_R_32F, 4, &zero, c.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

class CapiGemmExGpu : public CublasGpuTest {};

TEST_F(CapiGemmExGpu, HalfOutOfCoreAndDirect) {
  const int m = 300, n = 200, k = 1000;
  std::mt19937 rng(test_seed(45));
  const Rounded A = rounded(ooc::DType::float16, random_vector(static_cast<size_t>(m) * k, rng));
  const Rounded B = rounded(ooc::DType::float16, random_vector(static_cast<size_t>(k) * n, rng));
  const std::vector<double> want = sgemm_ref(false, false, m, n, k, 1.0, A.values, m, B.values, k, 0.0,
                                             std::vector<float>(static_cast<size_t>(m) * n), m);
  const float one = 1.0f, zero = 0.0f;
  auto check = [&](const std::vector<uint16_t>& C, const char* what) {
    std::vector<float> got(C.size());
    ooc::host_elements::convert(ooc::DType::float16, C.data(), ooc::DType::float32, got.data(),
                                static_cast<int64_t>(C.size()));
    EXPECT_LE(compare(got, want).relative_error, 1e-3) << what;
  };
  // Pageable memory under a budget: out of core, K split and summed in float32.
  std::vector<uint16_t> C(static_cast<size_t>(m) * n, 0x7fff);
  oocSetMemoryLimit(size_t{1} << 20);
  ASSERT_EQ(ooc_cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A.bits.data(), CUDA_R_16F, m,
                             B.bits.data(), CUDA_R_16F, k, &zero, C.data(), CUDA_R_16F, m, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  expect_split_run("gemm_ex out of core");
  check(C, "out of core");
  // Device memory (ooc_cudaMalloc gives device memory while the device has room) without a budget:
  // cublasGemmEx itself.
  oocSetMemoryLimit(0);
  void *dA = nullptr, *dB = nullptr, *dC = nullptr;
  const size_t a_bytes = A.bits.size() * 2, b_bytes = B.bits.size() * 2, c_bytes = C.size() * 2;
  ASSERT_EQ(ooc_cudaMalloc(&dA, a_bytes), cudaSuccess);
  ASSERT_EQ(ooc_cudaMalloc(&dB, b_bytes), cudaSuccess);
  ASSERT_EQ(ooc_cudaMalloc(&dC, c_bytes), cudaSuccess);
  EXPECT_EQ(ooc_cudaMemcpy(dA, A.bits.data(), a_bytes, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(ooc_cudaMemcpy(dB, B.bits.data(), b_bytes, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(ooc_cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_16F, m, dB, CUDA_R_16F, k,
                             &zero, dC, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  std::vector<uint16_t> direct(C.size(), 0x7fff);
  EXPECT_EQ(ooc_cudaMemcpy(direct.data(), dC, c_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_NE(last_plan().find("cublasGemmEx"), std::string::npos) << last_plan();
  check(direct, "direct");
  EXPECT_EQ(ooc_cudaFree(dA), cudaSuccess);
  EXPECT_EQ(ooc_cudaFree(dB), cudaSuccess);
  EXPECT_EQ(ooc_cudaFree(dC), cudaSuccess);
}

}  // namespace
