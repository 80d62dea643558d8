// cuBLAS SGEMM on row-major chunk tiles, in full FP32 (CUBLAS_DEFAULT_MATH: no TF32) unless the plan
// permits TF32; half chunks through cublasGemmEx with float32 compute. The handle
// is made on first use, so a process that never multiplies never loads libcublas' kernels.
#pragma once

#include <cublas_v2.h>

#include "backend/backend.hpp"

namespace ooc {

class CublasGemm {
 public:
  CublasGemm() = default;
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // c = alpha * op(a) @ op(b) + beta * c on `stream` (backend.hpp's ChunkGemm); beta == 0 never reads c.
  // cuBLAS works in `workspace` (the plan's, inside its budget; none when 0 bytes), never its own pool.
  // a and b of s.dtype, c of s.out_dtype.
  void run(const ChunkGemm& s, const void* a, const void* b, void* c, double alpha, double beta, void* workspace,
           size_t workspace_bytes, cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace ooc
