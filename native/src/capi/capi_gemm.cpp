// ooc_cublasSgemm and ooc_cublasGemmEx: cuBLAS' GEMMs over device, pinned or pageable memory.
// cuBLAS is column-major and the library's matmul row-major: a column-major [rows, cols] matrix
// with leading dimension ld is the row-major [cols, rows] one with row stride ld, so
// C = op(A) op(B) runs as the row-major C^T = op(B)^T op(A)^T, B the left operand.
#include <cublas_v2.h>

#include <functional>
#include <string>
#include <vector>

#include "api/cuda_status.hpp"
#include "api/float32_output.hpp"
#include "api/memory_kind.hpp"
#include "capi/capi_cublas.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cublas.h"

namespace ooc::capi {
namespace {

// C = beta * C over the m x n column-major host matrix of `dtype` (k == 0: no product to add);
// beta == 0 writes zeros without reading C, as cuBLAS does.
void scale_host_matrix(DType dtype, void* C, int m, int n, int ldc, float beta) {
  std::vector<float> column(static_cast<size_t>(m));
  const size_t es = dtype_size(dtype);
  for (int64_t j = 0; j < n; ++j) {
    char* col = static_cast<char*>(C) + static_cast<size_t>(j * ldc) * es;
    if (beta != 0.0f) convert_elements(dtype, col, DType::float32, column.data(), m);
    for (float& v : column) v = beta == 0.0f ? 0.0f : beta * v;
    convert_elements(DType::float32, column.data(), dtype, col, m);
  }
}

// One column-major GEMM of `dtype` (A, B and C alike; alpha and beta float): cuBLAS' own call
// (`direct`) where the operands are on the device within the budget, out of core otherwise.
// `call` names cuBLAS' function in messages and plans ("cublasSgemm", "cublasGemmEx").
cublasStatus_t gemm(const char* call, cublasHandle_t handle, DType dtype, cublasOperation_t transa,
                    cublasOperation_t transb, int m, int n, int k, const float* alpha, const void* A, int lda,
                    const void* B, int ldb, const float* beta, void* C, int ldc,
                    const std::function<cublasStatus_t()>& direct) {
  const std::string name(call);
  const bool ta = transposes(transa, "transa"), tb = transposes(transb, "transb");
  if (m < 0 || n < 0 || k < 0)
    throw invalid_argument("m, n and k must be non-negative, got " + std::to_string(m) + ", " + std::to_string(n) +
                           ", " + std::to_string(k));
  check_ld("lda", lda, ta ? k : m);
  check_ld("ldb", ldb, tb ? n : k);
  check_ld("ldc", ldc, m);
  require_pointers({{alpha, "alpha"}, {beta, "beta"}});
  if (m == 0 || n == 0) {
    record_direct_call(name + ": m or n is 0, nothing to compute");
    return CUBLAS_STATUS_SUCCESS;
  }
  require_pointer(C, "C");
  const int64_t c_span = int64_t{ldc} * n;
  if (k == 0) {  // C = beta * C: device memory in place by cuBLAS (no budget involved), host memory here
    if (!host_backend_for_tests() && api::is_device_memory(C)) {
      const cublasStatus_t status = direct();
      if (status == CUBLAS_STATUS_SUCCESS) record_direct_call(name + " called directly: k is 0, C scaled");
      return status;
    }
    if (!host_backend_for_tests()) cublas_out_of_core_options(handle);  // waits for the handle's stream
    scale_host_matrix(dtype, C, m, n, ldc, read_scalar(handle, beta));
    record_direct_call(name + ": k is 0, C scaled on the host");
    return CUBLAS_STATUS_SUCCESS;
  }
  require_pointers({{A, "A"}, {B, "B"}});
  const int64_t a_span = int64_t{lda} * (ta ? m : k), b_span = int64_t{ldb} * (tb ? k : n);
  // (in_core weighs every element as a float32 one: a half call stays direct only where its float32
  // twin would fit, a conservative test.)
  return dispatch_call(
      CUBLAS_STATUS_SUCCESS, call, handle, {{A, a_span}, {B, b_span}, {C, c_span}},
      [handle] { return cublas_out_of_core_options(handle); }, direct,
      [&](const Options& options, Plan* plan, RunStats* stats) {
        const ConvProblem p = matmul_problem({n, k}, {k, m}, read_scalar(handle, alpha), read_scalar(handle, beta),
                                             false, dtype);
        matmul(p, tb, ta, B, ldb, A, lda, nullptr, C, ldc, options, plan, stats);
      });
}

}  // namespace
}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cublasStatus_t ooc_cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const float* alpha, const float* A, int lda,
                                          const float* B, int ldb, const float* beta, float* C, int ldc) {
  if (!handle) return null_handle("ooc_cublasSgemm");
  return guarded_cublas("ooc_cublasSgemm", [&]() -> cublasStatus_t {
    return gemm("cublasSgemm", handle, DType::float32, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
                [&] { return cublasSgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); });
  });
}

namespace {

// The dtype of cublasGemmEx's matrices that the library serves (A, B and C alike), or
// not_supported naming the argument that differs or is another type.
ooc::DType gemm_ex_dtype(cudaDataType_t a, cudaDataType_t b, cudaDataType_t c) {
  if (b != a) throw ooc::not_supported("Btype must be Atype (one data type for A, B and C)");
  if (c != a) throw ooc::not_supported("Ctype must be Atype (one data type for A, B and C)");
  switch (a) {
    case CUDA_R_32F: return ooc::DType::float32;
    case CUDA_R_16F: return ooc::DType::float16;
    case CUDA_R_16BF: return ooc::DType::bfloat16;
    default: throw ooc::not_supported("Atype must be CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF, got " + std::to_string(a));
  }
}

}  // namespace

extern "C" cublasStatus_t ooc_cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const void* alpha, const void* A,
                                           cudaDataType_t Atype, int lda, const void* B, cudaDataType_t Btype, int ldb,
                                           const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                                           cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (!handle) return null_handle("ooc_cublasGemmEx");
  return guarded_cublas("ooc_cublasGemmEx", [&]() -> cublasStatus_t {
    const DType dtype = gemm_ex_dtype(Atype, Btype, Ctype);
    // Float32 compute (alpha and beta float), as the out-of-core GEMM computes; a float32 call
    // follows the handle's math mode as cublasSgemm does.
    if (computeType != CUBLAS_COMPUTE_32F)
      throw not_supported("computeType must be CUBLAS_COMPUTE_32F, got " + std::to_string(computeType));
    const float* alpha_f = static_cast<const float*>(alpha);
    const float* beta_f = static_cast<const float*>(beta);
    return gemm("cublasGemmEx", handle, dtype, transa, transb, m, n, k, alpha_f, A, lda, B, ldb, beta_f, C, ldc, [&] {
      return cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                          computeType, algo);
    });
  });
}
