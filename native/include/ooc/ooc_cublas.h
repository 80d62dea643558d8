/* libooc's cuBLAS look-alike: SGEMM over device, pinned or pageable memory.
 *
 * A header of its own because it needs cuBLAS' headers (cublas_v2.h: NVIDIA's nvidia-cublas wheel,
 * site-packages/nvidia/cu13/include, or the CUDA toolkit), which ooc_cudnn.h does not; it includes
 * ooc_cudnn.h, so oocSetMemoryLimit, oocGetLastPlanInfo and oocGetLastErrorString come with it.
 */
#ifndef OOC_CUBLAS_H
#define OOC_CUBLAS_H

#include <cublas_v2.h>

#include "ooc/ooc_cudnn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C = alpha * op(A) * op(B) + beta * C, column-major as cublasSgemm (cuBLAS v2): C is m x n with
 * leading dimension ldc, op(A) m x k, op(B) k x n; op is CUBLAS_OP_N, CUBLAS_OP_T or CUBLAS_OP_C (the
 * same as T for real matrices). C is never read when beta == 0. alpha and beta are read as the
 * handle's pointer mode says (host or device memory).
 *   - A, B and C on the device and within oocSetMemoryLimit's budget (or no budget set): the call
 *     goes straight to cublasSgemm with the caller's handle (its stream, math mode, workspace);
 *   - otherwise pyooc runs it out of core (tiles of C, with K split and accumulated when needed)
 *     on its own streams after synchronizing the handle's stream, in plain FP32 whatever the
 *     handle's math mode, and returns when C is in place.
 * Status: CUBLAS_STATUS_NOT_INITIALIZED for a null handle; CUBLAS_STATUS_INVALID_VALUE for m, n
 * or k < 0, another op, a leading dimension below its matrix's rows, or a null pointer that would be
 * read; CUBLAS_STATUS_ALLOC_FAILED when no split fits the budget or memory runs out;
 * CUBLAS_STATUS_EXECUTION_FAILED when a CUDA call fails; cuBLAS' own status when the direct call
 * fails; CUBLAS_STATUS_INTERNAL_ERROR otherwise. oocGetLastErrorString says why; oocGetLastPlanInfo
 * and oocGetLastPlanDescription what ran. m == 0 or n == 0 does nothing; k == 0 scales C by beta. */
cublasStatus_t ooc_cublasSgemm(cublasHandle_t handle,
                               cublasOperation_t transa,
                               cublasOperation_t transb,
                               int m,
                               int n,
                               int k,
                               const float *alpha,
                               const float *A,
                               int lda,
                               const float *B,
                               int ldb,
                               const float *beta,
                               float *C,
                               int ldc);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* OOC_CUBLAS_H */
