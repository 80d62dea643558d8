#include "backend/cuda/cublas_gemm.hpp"

#include <limits>
#include <string>

#include "backend/cuda/cuda_check.hpp"

namespace ooc {
namespace {

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(static_cast<int>(status),
                     std::string(call) + " failed: " + cublasGetStatusName(status) + " (" +
                         cublasGetStatusString(status) + ")");
}

int as_int(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max())
    throw std::logic_error(std::string("cublas gemm: ") + what + " exceeds int (the planner keeps tiles below 2^31)");
  return static_cast<int>(v);
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::float16: return CUDA_R_16F;
    case DType::bfloat16: return CUDA_R_16BF;
    case DType::float32: break;
  }
  return CUDA_R_32F;
}

}  // namespace

CublasGemm::~CublasGemm() {
  if (handle_) (void)cublasDestroy(handle_);
}

void CublasGemm::run(const ChunkGemm& s, const void* a, const void* b, void* c, double alpha, double beta,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!handle_) {
    check_cublas(cublasCreate(&handle_), "cublasCreate");
    check_cublas(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
  }
  check_cublas(cublasSetStream(handle_, stream), "cublasSetStream");
  // Per chunk, as the handle serves calls of either mode. CUBLAS_DEFAULT_MATH keeps cublasSgemm in
  // full FP32; CUBLAS_TF32_TENSOR_OP_MATH lets it round the operands to TF32 on tensor cores. TF32
  // is a float32 call's choice: a half call multiplies its exact half operands in float32 either way.
  const bool tf32 = s.math == MathMode::tf32 && s.dtype == DType::float32;
  check_cublas(cublasSetMathMode(handle_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  // After cublasSetStream, which resets the workspace to cuBLAS' own pool (memory outside the budget).
  check_cublas(cublasSetWorkspace(handle_, workspace_bytes ? workspace : nullptr, workspace_bytes),
               "cublasSetWorkspace");
  // cuBLAS is column-major: a row-major [r, c] matrix is its column-major [c, r]. So row-major
  // C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T: the operands swap places.
  const int m = as_int(s.m, "m"), n = as_int(s.n, "n"), k = as_int(s.k, "k");
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = s.trans_b ? k : n;  // b stored [n, k] when transposed, else [k, n]
  const int lda = s.trans_a ? m : k;  // a stored [k, m] when transposed, else [m, k]
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  if (s.dtype == DType::float32 && s.out_dtype == DType::float32) {
    check_cublas(cublasSgemm(handle_, op_b, op_a, n, m, k, &alpha_f, static_cast<const float*>(b), ldb,
                             static_cast<const float*>(a), lda, &beta_f, static_cast<float*>(c), n),
                 "cublasSgemm");
    return;
  }
  // Half operands, c in half or in the float32 accumulator of a split K; products summed in float32
  // (CUBLAS_COMPUTE_32F, alpha and beta float), rounded once into c.
  check_cublas(cublasGemmEx(handle_, op_b, op_a, n, m, k, &alpha_f, b, cuda_type(s.dtype), ldb, a, cuda_type(s.dtype),
                            lda, &beta_f, c, cuda_type(s.out_dtype), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

}  // namespace ooc
