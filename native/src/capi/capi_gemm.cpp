// ooc_cublasSgemm: cuBLAS' SGEMM over device, pinned or pageable memory. cuBLAS is column-major and
// the library's matmul row-major: a column-major [rows, cols] matrix with leading dimension ld is
// the row-major [cols, rows] one with row stride ld, so C = op(A) op(B) runs as the row-major
// C^T = op(B)^T op(A)^T, B the left operand.
#include <cublas_v2.h>

#include "api/cuda_status.hpp"
#include "api/memory_kind.hpp"
#include "capi/capi_cublas.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc_cublas.h"

namespace ooc::capi {
namespace {

// C = beta * C over the m x n column-major host matrix (k == 0: no product to add); beta == 0
// writes zeros without reading C, as cuBLAS does.
void scale_host_matrix(float* C, int m, int n, int ldc, float beta) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float& v = C[j * ldc + i];
      v = beta == 0.0f ? 0.0f : beta * v;
    }
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
    const bool ta = transposes(transa, "transa"), tb = transposes(transb, "transb");
    if (m < 0 || n < 0 || k < 0)
      throw invalid_argument("m, n and k must be non-negative, got " + std::to_string(m) + ", " + std::to_string(n) +
                             ", " + std::to_string(k));
    check_ld("lda", lda, ta ? k : m);
    check_ld("ldb", ldb, tb ? n : k);
    check_ld("ldc", ldc, m);
    require_pointers({{alpha, "alpha"}, {beta, "beta"}});
    if (m == 0 || n == 0) {
      record_direct_call("cublasSgemm: m or n is 0, nothing to compute");
      return CUBLAS_STATUS_SUCCESS;
    }
    require_pointer(C, "C");
    auto direct = [&] { return cublasSgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); };
    const int64_t c_span = int64_t{ldc} * n;
    if (k == 0) {  // C = beta * C: device memory in place by cuBLAS (no budget involved), host memory here
      if (!host_backend_for_tests() && api::is_device_memory(C)) {
        const cublasStatus_t status = direct();
        if (status == CUBLAS_STATUS_SUCCESS) record_direct_call("cublasSgemm called directly: k is 0, C scaled");
        return status;
      }
      if (!host_backend_for_tests()) cublas_out_of_core_options(handle);  // waits for the handle's stream
      scale_host_matrix(C, m, n, ldc, read_scalar(handle, beta));
      record_direct_call("cublasSgemm: k is 0, C scaled on the host");
      return CUBLAS_STATUS_SUCCESS;
    }
    require_pointers({{A, "A"}, {B, "B"}});
    const int64_t a_span = int64_t{lda} * (ta ? m : k), b_span = int64_t{ldb} * (tb ? k : n);
    return dispatch_call(
        CUBLAS_STATUS_SUCCESS, "cublasSgemm", {{A, a_span}, {B, b_span}, {C, c_span}},
        [handle] { return cublas_out_of_core_options(handle); }, direct,
        [&](const Options& options, Plan* plan, RunStats* stats) {
          const ConvProblem p = matmul_problem({n, k}, {k, m}, read_scalar(handle, alpha), read_scalar(handle, beta),
                                               false);
          matmul(p, tb, ta, B, ldb, A, lda, nullptr, C, ldc, options, plan, stats);
        });
  });
}
