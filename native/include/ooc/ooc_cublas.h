/* libooc's cuBLAS look-alikes: SGEMM and the level-1/2 calls training loops use, over device,
 * pinned or pageable memory.
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
 *     on its own streams after synchronizing the handle's stream, and returns when C is in place.
 *     It honours the handle's math mode as cublasSgemm does: TF32 under CUBLAS_TF32_TENSOR_OP_MATH,
 *     full FP32 under any other mode (CUBLAS_DEFAULT_MATH, cuBLAS' default, included).
 * Status: CUBLAS_STATUS_NOT_INITIALIZED for a null handle; CUBLAS_STATUS_INVALID_VALUE for m, n
 * or k < 0, another op, a leading dimension below its matrix's rows, or a null pointer that would be
 * read; CUBLAS_STATUS_ALLOC_FAILED when no split fits the budget or memory runs out;
 * CUBLAS_STATUS_EXECUTION_FAILED when a CUDA call fails or oocCublasCancel stopped it; cuBLAS'
 * own status when the direct call fails; CUBLAS_STATUS_INTERNAL_ERROR otherwise.
 * oocGetLastErrorString says why; oocGetLastPlanInfo and oocGetLastPlanDescription what ran.
 * m == 0 or n == 0 does nothing; k == 0 scales C by beta. */
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

/* cublasGemmEx's signature, as ooc_cublasSgemm for A, B and C of one data type: CUDA_R_32F,
 * CUDA_R_16F or CUDA_R_16BF, with computeType CUBLAS_COMPUTE_32F (alpha and beta float; the
 * handle's math mode honoured for CUDA_R_32F as ooc_cublasSgemm honours it). Half products are
 * summed in float32 however K is split; C is rounded to its type once. Direct calls go to
 * cublasGemmEx with the caller's arguments (algo included; out of core it is ignored). Other types,
 * mixed types and other compute types: CUBLAS_STATUS_NOT_SUPPORTED naming the argument; the rest
 * of the statuses as ooc_cublasSgemm's. */
cublasStatus_t ooc_cublasGemmEx(cublasHandle_t handle,
                                cublasOperation_t transa,
                                cublasOperation_t transb,
                                int m,
                                int n,
                                int k,
                                const void *alpha,
                                const void *A,
                                cudaDataType_t Atype,
                                int lda,
                                const void *B,
                                cudaDataType_t Btype,
                                int ldb,
                                const void *beta,
                                void *C,
                                cudaDataType_t Ctype,
                                int ldc,
                                cublasComputeType_t computeType,
                                cublasGemmAlgo_t algo);

/* Level 1 and 2, single precision, with cuBLAS' signatures and results. Vectors all on the device
 * (x and y; A too for gemv): cuBLAS itself with the caller's handle. Otherwise the vectors stream
 * through the device in chunks within oocSetMemoryLimit's budget (64 MiB of device buffers when none
 * is set) on the handle's stream, after waiting for it; the call returns when the results are in
 * place. dot and nrm2 combine the chunks' results in double (nrm2 as the root of the chunks' squared
 * norms), so they may differ from cuBLAS' in the last bits. gemv runs as the one-row GEMM
 * y^T = x^T op(A)^T through ooc_cublasSgemm (A tiled like any GEMM operand), so a matrix larger than
 * the GPU works. Increments follow cuBLAS (negative: the vector read from its end; scal then scales
 * nothing and nrm2 gives 0, as BLAS defines them); 0 is refused
 * (CUBLAS_STATUS_INVALID_VALUE), and gemv serves negative increments only when A, x and y are on
 * the device (CUBLAS_STATUS_NOT_SUPPORTED otherwise). Statuses as ooc_cublasSgemm's. */
cublasStatus_t ooc_cublasSaxpy(cublasHandle_t handle, int n, const float *alpha, const float *x, int incx, float *y,
                               int incy);
cublasStatus_t ooc_cublasSscal(cublasHandle_t handle, int n, const float *alpha, float *x, int incx);
cublasStatus_t ooc_cublasScopy(cublasHandle_t handle, int n, const float *x, int incx, float *y, int incy);
cublasStatus_t ooc_cublasSdot(cublasHandle_t handle, int n, const float *x, int incx, const float *y, int incy,
                              float *result);
cublasStatus_t ooc_cublasSnrm2(cublasHandle_t handle, int n, const float *x, int incx, float *result);
cublasStatus_t ooc_cublasSgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float *alpha,
                               const float *A, int lda, const float *x, int incx, const float *beta, float *y,
                               int incy);

/* oocCancel (ooc_cudnn.h) for the ooc_cublasSgemm running on `handle`: it returns
 * CUBLAS_STATUS_EXECUTION_FAILED (cuBLAS has no cancelled status; oocGetLastErrorString says
 * "cublasSgemm: the call was cancelled"). CUBLAS_STATUS_SUCCESS whether or not a call was running;
 * CUBLAS_STATUS_NOT_INITIALIZED for a null handle. */
cublasStatus_t oocCublasCancel(cublasHandle_t handle);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* OOC_CUBLAS_H */
