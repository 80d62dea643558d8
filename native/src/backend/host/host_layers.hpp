// Reference CPU kernels of the layers in layers.hpp (GEMM, batch norm), as backend.hpp specifies them.
#pragma once

#include "backend/backend.hpp"
#include "util/thread_pool.hpp"

namespace ooc {

// GEMM: a, b and bias of s.dtype, c of s.out_dtype (float32, float16, bfloat16), products summed in
// double and rounded once into c.
void host_gemm(const ChunkGemm& s, const void* a, const void* b, const void* bias, void* c, double alpha,
               double beta, ThreadPool& pool);
// Batch norm: x, dy and y in the chunk's dtype (float32, float16, bfloat16); statistics, sums and
// coefficients float32, the sums accumulated in double.
void host_channel_moments(const ChunkChannels& s, const void* x, double* stats, ThreadPool& pool);
void host_channel_grad_sums(const ChunkChannels& s, const void* x, const void* dy, const float* mean_invstd,
                            double* sums, ThreadPool& pool);
void host_channel_affine(const ChunkChannels& s, const void* x, const void* dy, const float* coef, double beta,
                         void* y, ThreadPool& pool);

}  // namespace ooc
