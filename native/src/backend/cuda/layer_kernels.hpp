// CUDA kernels of the batch-norm chunk operations (backend.hpp's channel_*), the GEMM bias, dtype
// conversion, a half dy's bias gradient and the activations cuDNN lacks,
// launched on the given stream; every launch is checked (cuda_error).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/backend.hpp"

namespace ooc::cuda_kernels {

// Device memory for the reductions' part sums, kept and grown as chunks need (a few KiB to MiB:
// c x parts x 16 bytes, outside the plan's arena).
class ReductionScratch {
 public:
  ReductionScratch() = default;
  ~ReductionScratch();
  ReductionScratch(const ReductionScratch&) = delete;
  ReductionScratch& operator=(const ReductionScratch&) = delete;
  double* get(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The reductions need float64 scratch of reduction_scratch_bytes(s) (device memory) for their part sums.
size_t reduction_scratch_bytes(const ChunkChannels& s);
// x, dy and y in the chunk's dtype (float32, float16, bfloat16); stats and sums float64 (summed in
// float64 whatever the dtype), coef float32.
void channel_moments(const ChunkChannels& s, const void* x, double* stats, double* scratch, cudaStream_t stream);
void channel_grad_sums(const ChunkChannels& s, const void* x, const void* dy, const float* mean_invstd, double* sums,
                       double* scratch, cudaStream_t stream);
// y = the per-channel affine map of x (and dy) + beta * y; beta == 0 never reads y.
void channel_affine(const ChunkChannels& s, const void* x, const void* dy, const float* coef, float beta, void* y,
                    cudaStream_t stream);
// The activations cuDNN has no mode for (backend/activation_formulas.hpp), over `count` dense
// elements, blended as cuDNN blends: out = alpha * r + beta * out; beta == 0 never reads out.
void activation_forward(int64_t count, ActivationMode mode, float coef, const float* x, float* y, float alpha,
                        float beta, cudaStream_t stream);
void activation_backward(int64_t count, ActivationMode mode, float coef, const float* y, const float* dy,
                         const float* x, float* dx, float alpha, float beta, cudaStream_t stream);
// out = alpha * a + beta * (b ? b : out) over bfloat16 chunks, a broadcast along its unit dims
// (add_tensor's contract, backend.hpp), computed in float32: cudnnAddTensor documents no bfloat16.
void add_tensor_bf16(const ChunkConv& a_shape, const ChunkConv& out_shape, float alpha, const void* a, float beta,
                     const void* b, void* out, cudaStream_t stream);
// c[i, j] += bias[j] over a row-major [rows, cols] matrix, bias of bias_dtype, c of c_dtype (a half
// GEMM's bias has its operands' dtype; c may be the float32 accumulator of a split K).
void add_row_bias(int64_t rows, int64_t cols, DType bias_dtype, const void* bias, DType c_dtype, void* c,
                  cudaStream_t stream);
// dst[i] = src[i] converted between dtypes, `count` dense elements (Backend::convert_on_device).
void convert(DType from, const void* src, DType to, void* dst, int64_t count, cudaStream_t stream);
// The gradient of a bias over a half-precision chunk (cuDNN's BackwardBias takes float32 here):
// db[k] = alpha * sum over n and space of dy[n, k, space] + beta * db[k], dy of s.dtype, db float32,
// the sum in float64 (reduction_scratch_bytes(s) of scratch; s.c counts dy's channels).
void channel_sum(const ChunkChannels& s, const void* dy, float alpha, float beta, float* db, double* scratch,
                 cudaStream_t stream);

}  // namespace ooc::cuda_kernels
