/* libooc's C API: drop-in replacements for cuDNN 9 convolution and layer calls (and cuBLAS' SGEMM,
 * ooc/ooc_cublas.h) that also take host memory.
 *
 * Each ooc_cudnnX takes exactly cudnnX's arguments (an existing cuDNN program switches by adding
 * the ooc_ prefix). Any data pointer may be device memory, pinned host memory or pageable host
 * memory (cudaPointerGetAttributes tells which):
 *   - everything on the device and within oocSetMemoryLimit's budget (or no budget set): the call
 *     goes straight to cuDNN with the caller's handle, algo and workspace (identical results);
 *   - otherwise pyooc runs it out of core: the operation is split into chunks that fit the budget
 *     and streamed through the GPU on pyooc's own streams. The handle's stream is synchronized
 *     first (its work may produce the inputs) and the call returns when the result is in place.
 *     `algo`, `workSpace` and `workSpaceSizeInBytes` are accepted and ignored there: each chunk
 *     has its own shape, so pyooc picks an algorithm per chunk and carves its workspace from the
 *     budget (the caller's workspace may be host memory or too small for any chunk's choice).
 *     Out-of-core chunks honour convDesc's math type as cuDNN does for float32 data: CUDNN_FMA_MATH
 *     is full FP32; CUDNN_DEFAULT_MATH (what cudnnCreateConvolutionDescriptor sets),
 *     CUDNN_TENSOR_OP_MATH and CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION let the chunks use TF32 on
 *     sm_80 and later (docs/precision.md). Set it with cuDNN's own cudnnSetConvolutionMathType
 *     (the descriptors are cuDNN's); half-precision data uses tensor cores under any of them.
 *
 * What is served today (both paths, so that a call's status never depends on the budget):
 * fully-packed NCHW float32 tensors and filters (4-D and 5-D: 2-D and 3-D convolution),
 * CUDNN_CROSS_CORRELATION with float compute type, group count 1. Anything else returns
 * CUDNN_STATUS_NOT_SUPPORTED. alpha/beta point to floats (cuDNN's convention for float data).
 *
 * Status codes: CUDNN_STATUS_BAD_PARAM for a null handle, descriptor or pointer, an unset
 * descriptor or mismatched shapes; CUDNN_STATUS_NOT_SUPPORTED as above; CUDNN_STATUS_ALLOC_FAILED
 * when no split fits the budget or memory runs out; cuDNN's own status when a cuDNN call fails;
 * CUDNN_STATUS_EXECUTION_FAILED when a CUDA call fails; OOC_STATUS_CANCELLED when oocCancel
 * stopped it; CUDNN_STATUS_INTERNAL_ERROR otherwise. Arguments are checked before the handle is used. oocGetLastErrorString says why a call of the
 * calling thread failed. Calls from several threads with distinct handles are safe.
 */
#ifndef OOC_CUDNN_H
#define OOC_CUDNN_H

#include <stddef.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = alpha * conv(x, w) + beta * y */
cudnnStatus_t ooc_cudnnConvolutionForward(cudnnHandle_t handle,
                                          const void *alpha,
                                          const cudnnTensorDescriptor_t xDesc,
                                          const void *x,
                                          const cudnnFilterDescriptor_t wDesc,
                                          const void *w,
                                          const cudnnConvolutionDescriptor_t convDesc,
                                          cudnnConvolutionFwdAlgo_t algo,
                                          void *workSpace,
                                          size_t workSpaceSizeInBytes,
                                          const void *beta,
                                          const cudnnTensorDescriptor_t yDesc,
                                          void *y);

/* y = act(alpha1 * conv(x, w) + alpha2 * z + bias), bias: [1, K, 1, 1(, 1)]. activationDesc must
 * be CUDNN_ACTIVATION_RELU or CUDNN_ACTIVATION_IDENTITY (other modes: CUDNN_STATUS_NOT_SUPPORTED).
 * Out of core, z is first copied into y when they differ, and the activation is a second pass
 * over y (on the CPU for host memory, cudnnActivationForward for device memory). */
cudnnStatus_t ooc_cudnnConvolutionBiasActivationForward(cudnnHandle_t handle,
                                                        const void *alpha1,
                                                        const cudnnTensorDescriptor_t xDesc,
                                                        const void *x,
                                                        const cudnnFilterDescriptor_t wDesc,
                                                        const void *w,
                                                        const cudnnConvolutionDescriptor_t convDesc,
                                                        cudnnConvolutionFwdAlgo_t algo,
                                                        void *workSpace,
                                                        size_t workSpaceSizeInBytes,
                                                        const void *alpha2,
                                                        const cudnnTensorDescriptor_t zDesc,
                                                        const void *z,
                                                        const cudnnTensorDescriptor_t biasDesc,
                                                        const void *bias,
                                                        const cudnnActivationDescriptor_t activationDesc,
                                                        const cudnnTensorDescriptor_t yDesc,
                                                        void *y);

/* dx = alpha * conv_transpose(dy, w) + beta * dx */
cudnnStatus_t ooc_cudnnConvolutionBackwardData(cudnnHandle_t handle,
                                               const void *alpha,
                                               const cudnnFilterDescriptor_t wDesc,
                                               const void *w,
                                               const cudnnTensorDescriptor_t dyDesc,
                                               const void *dy,
                                               const cudnnConvolutionDescriptor_t convDesc,
                                               cudnnConvolutionBwdDataAlgo_t algo,
                                               void *workSpace,
                                               size_t workSpaceSizeInBytes,
                                               const void *beta,
                                               const cudnnTensorDescriptor_t dxDesc,
                                               void *dx);

/* dw = alpha * sum over n and space of dy (x) x-windows + beta * dw */
cudnnStatus_t ooc_cudnnConvolutionBackwardFilter(cudnnHandle_t handle,
                                                 const void *alpha,
                                                 const cudnnTensorDescriptor_t xDesc,
                                                 const void *x,
                                                 const cudnnTensorDescriptor_t dyDesc,
                                                 const void *dy,
                                                 const cudnnConvolutionDescriptor_t convDesc,
                                                 cudnnConvolutionBwdFilterAlgo_t algo,
                                                 void *workSpace,
                                                 size_t workSpaceSizeInBytes,
                                                 const void *beta,
                                                 const cudnnFilterDescriptor_t dwDesc,
                                                 void *dw);

/* db = alpha * sum over n and space of dy + beta * db, db: [1, K, 1, 1(, 1)] */
cudnnStatus_t ooc_cudnnConvolutionBackwardBias(cudnnHandle_t handle,
                                               const void *alpha,
                                               const cudnnTensorDescriptor_t dyDesc,
                                               const void *dy,
                                               const void *beta,
                                               const cudnnTensorDescriptor_t dbDesc,
                                               void *db);

/* --- Fused calls (pyooc's own; no single cuDNN call does any of them) ---
 *
 * Each does, in one pass over the chunks, what the composition of cuDNN calls named with it does,
 * keeping the intermediates on the device: only its inputs cross the link once and its outputs
 * once. They always run out of core (on any mix of device, pinned and pageable pointers) and
 * record their plan like the calls above. Tensors: float32, fully-packed NCHW, 4-D or 5-D;
 * convolutions: cross-correlation, float compute, group count 1 (as above). Activation modes: all
 * of ooc_cudnnActivationForward's and CUDNN_ACTIVATION_IDENTITY (nothing applied); pooling modes as
 * ooc_cudnnPoolingForward's. */

/* y = pool(act(alpha1 * conv(x, w) + alpha2 * z + bias)); y has the pooled shape.
 * Replaces cudnnConvolutionBiasActivationForward (into a conv-output-shaped temporary t, zDesc's
 * shape) followed by cudnnPoolingForward(poolingDesc, t -> y); t never exists. z is read only when
 * *alpha2 != 0 (then required; otherwise z may be NULL). bias: [1, K, 1, 1(, 1)]. */
cudnnStatus_t ooc_cudnnConvolutionBiasActivationPoolingForward(cudnnHandle_t handle,
                                                               const void *alpha1,
                                                               const cudnnTensorDescriptor_t xDesc,
                                                               const void *x,
                                                               const cudnnFilterDescriptor_t wDesc,
                                                               const void *w,
                                                               const cudnnConvolutionDescriptor_t convDesc,
                                                               const void *alpha2,
                                                               const cudnnTensorDescriptor_t zDesc,
                                                               const void *z,
                                                               const cudnnTensorDescriptor_t biasDesc,
                                                               const void *bias,
                                                               const cudnnActivationDescriptor_t activationDesc,
                                                               const cudnnPoolingDescriptor_t poolingDesc,
                                                               const cudnnTensorDescriptor_t yDesc,
                                                               void *y);

/* y = act(alpha1 * conv_transpose(x, w) + alpha2 * z + bias): a transposed convolution (torch's
 * ConvTranspose) with bias and activation. Replaces cudnnConvolutionBackwardData(alpha1, wDesc, w,
 * dyDesc = xDesc, x, convDesc, beta = alpha2, dxDesc = yDesc, y = z) -> cudnnAddTensor(bias) ->
 * cudnnActivationForward. wDesc: [C_in, C_out, kernel...] (x's channels first, cuDNN's filter of the
 * forward convolution that y -> x would be); y: [N, C_out, out...] with out = (in - 1) * stride -
 * 2 * padding + dilation * (kernel - 1) + 1 + output_padding, where output_padding (0 <= it <
 * stride) is implied by yDesc's shape; bias [1, C_out, 1, 1(, 1)]. z as above (y-shaped). */
cudnnStatus_t ooc_cudnnDeconvolutionBiasActivationForward(cudnnHandle_t handle,
                                                          const void *alpha1,
                                                          const cudnnTensorDescriptor_t xDesc,
                                                          const void *x,
                                                          const cudnnFilterDescriptor_t wDesc,
                                                          const void *w,
                                                          const cudnnConvolutionDescriptor_t convDesc,
                                                          const void *alpha2,
                                                          const cudnnTensorDescriptor_t zDesc,
                                                          const void *z,
                                                          const cudnnTensorDescriptor_t biasDesc,
                                                          const void *bias,
                                                          const cudnnActivationDescriptor_t activationDesc,
                                                          const cudnnTensorDescriptor_t yDesc,
                                                          void *y);

/* dx, dw, db of a convolution y = conv(x, w) (+ bias) from one pass over dy, all three fresh
 * (alpha 1, beta 0). Replaces cudnnConvolutionBackwardData(w, dy -> dx),
 * cudnnConvolutionBackwardFilter(x, dy -> dw) and cudnnConvolutionBackwardBias(dy -> db): dy
 * crosses the link once instead of three times. dxDesc like xDesc, dwDesc like wDesc, dbDesc
 * [1, K, 1, 1(, 1)]; no output may alias an input. */
cudnnStatus_t ooc_cudnnConvolutionBackwardDataFilterBias(cudnnHandle_t handle,
                                                         const cudnnTensorDescriptor_t xDesc,
                                                         const void *x,
                                                         const cudnnTensorDescriptor_t dyDesc,
                                                         const void *dy,
                                                         const cudnnFilterDescriptor_t wDesc,
                                                         const void *w,
                                                         const cudnnConvolutionDescriptor_t convDesc,
                                                         const cudnnTensorDescriptor_t dxDesc,
                                                         void *dx,
                                                         const cudnnFilterDescriptor_t dwDesc,
                                                         void *dw,
                                                         const cudnnTensorDescriptor_t dbDesc,
                                                         void *db);

/* The same for y = act(pre), pre = conv(x, w) + bias: dz = act'(pre) * dy is formed per chunk on
 * the device and never leaves it. Replaces cudnnActivationBackward(activationDesc, y, dy, pre -> dz)
 * followed by the three calls above on dz. y, pre and dy are conv-output-shaped. pre may be NULL
 * (preDesc then unread) for RELU, SIGMOID and TANH, whose gradients y alone gives; CLIPPED_RELU, ELU
 * and SWISH need it (BAD_PARAM otherwise). IDENTITY: y and pre unread (may be NULL). */
cudnnStatus_t ooc_cudnnActivationConvolutionBackwardDataFilterBias(cudnnHandle_t handle,
                                                                   const cudnnActivationDescriptor_t activationDesc,
                                                                   const cudnnTensorDescriptor_t xDesc,
                                                                   const void *x,
                                                                   const cudnnFilterDescriptor_t wDesc,
                                                                   const void *w,
                                                                   const cudnnConvolutionDescriptor_t convDesc,
                                                                   const cudnnTensorDescriptor_t yDesc,
                                                                   const void *y,
                                                                   const cudnnTensorDescriptor_t preDesc,
                                                                   const void *pre,
                                                                   const cudnnTensorDescriptor_t dyDesc,
                                                                   const void *dy,
                                                                   const cudnnTensorDescriptor_t dxDesc,
                                                                   void *dx,
                                                                   const cudnnFilterDescriptor_t dwDesc,
                                                                   void *dw,
                                                                   const cudnnTensorDescriptor_t dbDesc,
                                                                   void *db);

/* And with a pooling's backward folded in, for q = pool(y), y = act(pre), pre = conv(x, w) + bias
 * (ooc_cudnnConvolutionBiasActivationPoolingForward's chain): replaces
 * cudnnPoolingBackward(poolingDesc, q, dq, y -> dy) -> cudnnActivationBackward(y, dy, pre -> dz) ->
 * the three convolution gradients of dz; dy and dz never leave the device. q and dq pooled-shaped,
 * y and pre conv-output-shaped (yDesc stands for the convolution's dy). pre as above; y is always
 * read (the pooling's input). */
cudnnStatus_t ooc_cudnnPoolingActivationConvolutionBackwardDataFilterBias(
    cudnnHandle_t handle,
    const cudnnPoolingDescriptor_t poolingDesc,
    const cudnnActivationDescriptor_t activationDesc,
    const cudnnTensorDescriptor_t xDesc,
    const void *x,
    const cudnnFilterDescriptor_t wDesc,
    const void *w,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc,
    const void *y,
    const cudnnTensorDescriptor_t preDesc,
    const void *pre,
    const cudnnTensorDescriptor_t qDesc,
    const void *q,
    const cudnnTensorDescriptor_t dqDesc,
    const void *dq,
    const cudnnTensorDescriptor_t dxDesc,
    void *dx,
    const cudnnFilterDescriptor_t dwDesc,
    void *dw,
    const cudnnTensorDescriptor_t dbDesc,
    void *db);

/* --- Layers (cuDNN's legacy ops API, cudnn_ops.h) ---
 *
 * Same contract as the convolutions above: exactly cuDNN's arguments, any pointer device, pinned or
 * pageable, cuDNN called directly when every tensor is on the device within the memory limit, else
 * the out-of-core path; alpha and beta (floats) blend into the output as cuDNN defines:
 * out = alpha * result + beta * out, the output never read when beta == 0. Tensors: float32,
 * fully-packed NCHW (any other strides or layout: CUDNN_STATUS_NOT_SUPPORTED on both paths);
 * ranks as noted per call. Out of core, the activation and pooling descriptors' NaN option is not
 * honoured (NaN inputs give unspecified results there). */

/* C = alpha * A + beta * C; each dimension of A is C's or 1 (broadcast). 4-D or 5-D. */
cudnnStatus_t ooc_cudnnAddTensor(cudnnHandle_t handle,
                                 const void *alpha,
                                 const cudnnTensorDescriptor_t aDesc,
                                 const void *A,
                                 const void *beta,
                                 const cudnnTensorDescriptor_t cDesc,
                                 void *C);

/* y = alpha * f(x) + beta * y; x == y allowed. Modes: RELU, SIGMOID, TANH, CLIPPED_RELU, ELU, SWISH
 * (CUDNN_ACTIVATION_IDENTITY is for cudnnConvolutionBiasActivationForward only: BAD_PARAM). Any rank
 * from 3 to 8 (an element-wise op: the layout of the dims beyond C does not matter). */
cudnnStatus_t ooc_cudnnActivationForward(cudnnHandle_t handle,
                                         cudnnActivationDescriptor_t activationDesc,
                                         const void *alpha,
                                         const cudnnTensorDescriptor_t xDesc,
                                         const void *x,
                                         const void *beta,
                                         const cudnnTensorDescriptor_t yDesc,
                                         void *y);

/* dx = alpha * f'(x) * dy + beta * dx (from y = f(x), dy and x); dx == dy allowed. As above. */
cudnnStatus_t ooc_cudnnActivationBackward(cudnnHandle_t handle,
                                          cudnnActivationDescriptor_t activationDesc,
                                          const void *alpha,
                                          const cudnnTensorDescriptor_t yDesc,
                                          const void *y,
                                          const cudnnTensorDescriptor_t dyDesc,
                                          const void *dy,
                                          const cudnnTensorDescriptor_t xDesc,
                                          const void *x,
                                          const void *beta,
                                          const cudnnTensorDescriptor_t dxDesc,
                                          void *dx);

/* y = alpha * pool(x) + beta * y. 4-D or 5-D (2-D or 3-D windows). Modes: MAX, MAX_DETERMINISTIC,
 * AVERAGE_COUNT_INCLUDE_PADDING, AVERAGE_COUNT_EXCLUDE_PADDING. Padding above half the window:
 * CUDNN_STATUS_NOT_SUPPORTED. */
cudnnStatus_t ooc_cudnnPoolingForward(cudnnHandle_t handle,
                                      const cudnnPoolingDescriptor_t poolingDesc,
                                      const void *alpha,
                                      const cudnnTensorDescriptor_t xDesc,
                                      const void *x,
                                      const void *beta,
                                      const cudnnTensorDescriptor_t yDesc,
                                      void *y);

/* dx = alpha * (the gradient of pooling for dy, from y, dy and x) + beta * dx. As above. */
cudnnStatus_t ooc_cudnnPoolingBackward(cudnnHandle_t handle,
                                       const cudnnPoolingDescriptor_t poolingDesc,
                                       const void *alpha,
                                       const cudnnTensorDescriptor_t yDesc,
                                       const void *y,
                                       const cudnnTensorDescriptor_t dyDesc,
                                       const void *dy,
                                       const cudnnTensorDescriptor_t xDesc,
                                       const void *x,
                                       const void *beta,
                                       const cudnnTensorDescriptor_t dxDesc,
                                       void *dx);

/* y = alpha * softmax(x) + beta * y over C per (n, position) (CUDNN_SOFTMAX_MODE_CHANNEL) or over
 * C and space per n (..._INSTANCE); CUDNN_SOFTMAX_LOG: log-softmax; FAST and ACCURATE both compute
 * the accurate (max-subtracted) softmax out of core. Any rank from 3 to 8. */
cudnnStatus_t ooc_cudnnSoftmaxForward(cudnnHandle_t handle,
                                      cudnnSoftmaxAlgorithm_t algo,
                                      cudnnSoftmaxMode_t mode,
                                      const void *alpha,
                                      const cudnnTensorDescriptor_t xDesc,
                                      const void *x,
                                      const void *beta,
                                      const cudnnTensorDescriptor_t yDesc,
                                      void *y);

/* dx = alpha * (the gradient of softmax for dy, from y) + beta * dx. As above. */
cudnnStatus_t ooc_cudnnSoftmaxBackward(cudnnHandle_t handle,
                                       cudnnSoftmaxAlgorithm_t algo,
                                       cudnnSoftmaxMode_t mode,
                                       const void *alpha,
                                       const cudnnTensorDescriptor_t yDesc,
                                       const void *y,
                                       const cudnnTensorDescriptor_t dyDesc,
                                       const void *dy,
                                       const void *beta,
                                       const cudnnTensorDescriptor_t dxDesc,
                                       void *dx);

/* Batch normalization, 4-D or 5-D x. CUDNN_BATCHNORM_SPATIAL and SPATIAL_PERSISTENT (the same math):
 * statistics per channel over N and space, bnScaleBiasMeanVarDesc [1, C, 1, 1(, 1)];
 * CUDNN_BATCHNORM_PER_ACTIVATION: per (C, space) position over N, descriptor [1, C, H, W(, D)].
 * Training: y = alpha * BN(x) + beta * y with the batch's mean and biased variance; running mean and
 * variance (both or neither) are updated as r = (1 - exponentialAverageFactor) * r + factor * stat,
 * with the unbiased variance; resultSaveMean / resultSaveInvVariance (both or neither) receive the
 * mean and 1 / sqrt(var + epsilon). Out of core, x is read twice (statistics, then y). epsilon must
 * be at least CUDNN_BN_MIN_EPSILON and positive (0: CUDNN_STATUS_NOT_SUPPORTED). */
cudnnStatus_t ooc_cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle,
                                                         cudnnBatchNormMode_t mode,
                                                         const void *alpha,
                                                         const void *beta,
                                                         const cudnnTensorDescriptor_t xDesc,
                                                         const void *x,
                                                         const cudnnTensorDescriptor_t yDesc,
                                                         void *y,
                                                         const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
                                                         const void *bnScale,
                                                         const void *bnBias,
                                                         double exponentialAverageFactor,
                                                         void *resultRunningMean,
                                                         void *resultRunningVariance,
                                                         double epsilon,
                                                         void *resultSaveMean,
                                                         void *resultSaveInvVariance);

/* y = alpha * (bnScale * (x - estimatedMean) / sqrt(estimatedVariance + epsilon) + bnBias) + beta * y */
cudnnStatus_t ooc_cudnnBatchNormalizationForwardInference(cudnnHandle_t handle,
                                                          cudnnBatchNormMode_t mode,
                                                          const void *alpha,
                                                          const void *beta,
                                                          const cudnnTensorDescriptor_t xDesc,
                                                          const void *x,
                                                          const cudnnTensorDescriptor_t yDesc,
                                                          void *y,
                                                          const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
                                                          const void *bnScale,
                                                          const void *bnBias,
                                                          const void *estimatedMean,
                                                          const void *estimatedVariance,
                                                          double epsilon);

/* dx = alphaDataDiff * dx_BN + betaDataDiff * dx; dBnScaleResult, dBnBiasResult likewise with
 * alphaParamDiff / betaParamDiff. savedMean / savedInvVariance: the training call's (both or
 * neither; neither: recomputed from x with epsilon, one more pass over x out of core). */
cudnnStatus_t ooc_cudnnBatchNormalizationBackward(cudnnHandle_t handle,
                                                  cudnnBatchNormMode_t mode,
                                                  const void *alphaDataDiff,
                                                  const void *betaDataDiff,
                                                  const void *alphaParamDiff,
                                                  const void *betaParamDiff,
                                                  const cudnnTensorDescriptor_t xDesc,
                                                  const void *x,
                                                  const cudnnTensorDescriptor_t dyDesc,
                                                  const void *dy,
                                                  const cudnnTensorDescriptor_t dxDesc,
                                                  void *dx,
                                                  const cudnnTensorDescriptor_t dBnScaleBiasDesc,
                                                  const void *bnScale,
                                                  void *dBnScaleResult,
                                                  void *dBnBiasResult,
                                                  double epsilon,
                                                  const void *savedMean,
                                                  const void *savedInvVariance);

/* ooc_cublasSgemm (cuBLAS' cublasSgemm over any memory) is declared in ooc/ooc_cublas.h, which
 * includes this header and cuBLAS' cublas_v2.h; this one needs only cuDNN's and CUDA's headers. */

/* Memory as ooc_cuDNN placed it: ooc_cudaMalloc gives device memory while the device has room
 * (beyond the oocSetMemoryLimit bytes the out-of-core path needs for itself, an eighth of the
 * device when no limit is set, and within
 * oocSetDeviceAllocationLimit), then page-locked host memory; every ooc_cudnn* call takes
 * either. ooc_cudaFree frees either kind. ooc_cudaMemcpy copies between any two of device, pinned
 * and pageable memory (`kind` is checked but the direction is taken from the pointers, since an
 * ooc_cudaMalloc'd "device" buffer may be in host memory). ooc_cudaMemset sets either kind. */
cudaError_t ooc_cudaMalloc(void **devPtr, size_t size);
cudaError_t ooc_cudaFree(void *devPtr);
cudaError_t ooc_cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t ooc_cudaMemset(void *devPtr, int value, size_t count);

/* Stream-ordered, as cudaMemcpyAsync and cudaMemsetAsync, over any mix of device, pinned, pageable
 * and ooc_cudaMalloc'd memory (the direction is taken from the pointers; every cudaMemcpyKind,
 * cudaMemcpyDefault included, is accepted). A copy from or to pageable memory may return only once
 * it is done, as cudaMemcpyAsync's does. Setting host memory (an ooc_cudaMalloc'd buffer placed
 * there) runs as a host function on the stream, after the stream's earlier work. */
cudaError_t ooc_cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                cudaStream_t stream);
cudaError_t ooc_cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

/* Page-locked host memory, as cudaMallocHost (portable to every device); ooc_cudaFreeHost and
 * ooc_cudaFree both free it. */
cudaError_t ooc_cudaMallocHost(void **ptr, size_t size);
cudaError_t ooc_cudaFreeHost(void *ptr);

/* The memory as the program sees it through ooc_cudaMalloc: `free` is what it can still allocate
 * (device room beyond the out-of-core reserve and within oocSetDeviceAllocationLimit, plus the host
 * memory available for page-locked allocations), `total` the same with nothing allocated (the
 * device's share plus the host's physical memory). Either may be null. */
cudaError_t ooc_cudaMemGetInfo(size_t *free, size_t *total);

/* Device bytes one out-of-core call may use (0: most of the free device memory). Also the
 * in-core threshold: a call whose tensors are all on the device goes straight to cuDNN when their
 * bytes fit this limit (or no limit is set). Process-wide; pyooc.set_memory_limit sets the same. */
void oocSetMemoryLimit(size_t bytes);
size_t oocGetMemoryLimit(void);

/* The devices every out-of-core call spreads its chunks over, each running its own pipeline under
 * oocSetMemoryLimit's budget (count 0, the default: the handle's device alone, that is its
 * stream's, or the current device for the legacy stream). Convolutions, the layers and batch norm
 * spread (output tiles shared out, dw and db summed from partial sums, batch norm's statistics
 * merged once); the fused backward calls and ConvolutionBiasActivationPoolingForward run on the
 * first device listed. A device
 * listed twice gets two pipelines.
 * CUDNN_STATUS_BAD_PARAM for a negative count or ordinal, or null devices with count > 0; ordinals
 * past the devices present fail the next call. oocGetDevices copies up to `capacity` of them and
 * returns how many are set. Process-wide, like oocSetMemoryLimit. */
cudnnStatus_t oocSetDevices(const int *devices, int count);
int oocGetDevices(int *devices, int capacity);

/* The most bytes ooc_cudaMalloc places on the device in total (default: no cap); beyond it,
 * allocations are pinned host memory. Lets a large GPU act as a small one. */
void oocSetDeviceAllocationLimit(size_t bytes);

/* The status of an out-of-core call that oocCancel stopped: one of cuDNN 9's execution failures
 * (its category, status / 1000 * 1000, is CUDNN_STATUS_EXECUTION_FAILED), pyooc's own code. */
#define OOC_STATUS_CANCELLED ((cudnnStatus_t)5900)

/* Asks the out-of-core call running on `handle` (from another thread, a signal handler excepted) to
 * stop: it issues no more chunks, waits for the copies and kernels already queued, frees what it
 * holds and returns OOC_STATUS_CANCELLED (oocGetLastErrorString: "...: the call was cancelled"),
 * its output partially written. Only calls running now are stopped, within about one chunk; a
 * call that goes straight to cuDNN (everything on the device within the budget) runs to its end.
 * CUDNN_STATUS_SUCCESS whether or not a call was running (nothing to cancel is no error);
 * CUDNN_STATUS_BAD_PARAM for a null handle. oocCublasCancel (ooc_cublas.h) is the same for SGEMM. */
cudnnStatus_t oocCancel(cudnnHandle_t handle);

/* What the calling thread's last successful ooc_cudnn* (or ooc_cublas*) call did. */
typedef struct oocPlanInfo {
  int outOfCore;             /* 0: cuDNN was called directly (the counts below are 0), 1: chunked */
  long long chunks;          /* chunks run */
  size_t peakDeviceBytes;    /* device bytes the plan holds at peak */
  size_t bytesH2D, bytesD2H; /* bytes copied over each link direction */
  double predictedSeconds;   /* the cost model's estimate */
  double seconds;            /* wall time of the chunked run */
} oocPlanInfo_t;

/* CUDNN_STATUS_BAD_PARAM for a null info; CUDNN_STATUS_NOT_INITIALIZED before any successful call. */
cudnnStatus_t oocGetLastPlanInfo(oocPlanInfo_t *info);

/* Writes the last call's plan as text (Plan::describe(), or a line naming the direct cuDNN call)
 * into buf, truncated to len - 1 characters and NUL-terminated (buf may be null when len is 0).
 * Returns the full text's length, as snprintf does ("" and 0 before any successful call). */
size_t oocGetLastPlanDescription(char *buf, size_t len);

/* Why the calling thread's last failed ooc_* call failed ("" after a success); as above. */
size_t oocGetLastErrorString(char *buf, size_t len);

/* What every successful ooc_cudnn* and ooc_cublas* call of the process did since the last
 * oocResetTotals (or the start): a program's training step, say, measured against its link. */
typedef struct oocTotals {
  long long calls;           /* successful calls */
  long long outOfCoreCalls;  /* of which ran chunked */
  long long chunks;
  size_t bytesH2D, bytesD2H; /* bytes copied over each link direction by the chunked calls */
  double seconds;            /* wall time of the chunked runs */
  double paceWaitSeconds;    /* of which the issuing thread waited for the device: near `seconds`
                                when the device bounds the runs, near 0 when issuing them does */
} oocTotals_t;
void oocResetTotals(void);
/* CUDNN_STATUS_BAD_PARAM for a null totals. */
cudnnStatus_t oocGetTotals(oocTotals_t *totals);

/* Pinned host <-> current device copy bandwidth in bytes per second, measured now (about 0.1 s):
 * each direction alone and both at once (total). Any pointer may be null. CUDNN_STATUS_EXECUTION_FAILED
 * without a GPU. */
cudnnStatus_t oocMeasureLinkBandwidth(double *h2d, double *d2h, double *bidirectional);

#ifdef __cplusplus
}  /* extern "C" */

/* cuda_runtime.h's conveniences for C++, so that adding the prefix is the whole change:
 * `float *x; ooc_cudaMalloc(&x, bytes);` compiles as `cudaMalloc(&x, bytes)` does. */
template <class T>
inline cudaError_t ooc_cudaMalloc(T **devPtr, size_t size) {
  return ooc_cudaMalloc(reinterpret_cast<void **>(devPtr), size);
}
template <class T>
inline cudaError_t ooc_cudaMallocHost(T **ptr, size_t size) {
  return ooc_cudaMallocHost(reinterpret_cast<void **>(ptr), size);
}
#endif

#endif /* OOC_CUDNN_H */
