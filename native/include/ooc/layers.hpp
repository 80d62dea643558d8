// libooc's layers beyond convolution: GEMM (matmul, linear) and batch normalization, out of core.
// Same contract as ooc.hpp's convolutions: host pointers, Options::memory_limit, a Plan and
// RunStats of what ran; problems are ConvProblem values whose op names the layer:
//   matmul:    c[M, N] = alpha * op(a) @ op(b) + beta * c (+ bias[N]); n = M, c = K, k = N.
//   batchnorm: x [n, c, spatial...] (rank 2 to 5), statistics per channel over n and space.
#pragma once

#include <cstdint>
#include <vector>

#include "ooc/ooc.hpp"
#include "ooc/pool_activation_softmax.hpp"  // the other layers: pooling, activation, softmax, add-tensor

namespace ooc {

// GEMM (matmul_problem: problem.hpp).
Plan plan_matmul(const ConvProblem& problem, const Options& options);
// trans_a: a is stored [K, M] (op(a) = a^T); trans_b: b is stored [N, K]. bias: [N] or null
// (problem.has_bias). c is never read when beta == 0. a, b, bias and c have problem.dtype (float32,
// float16, bfloat16: torch's F.linear takes its bias in the input's dtype too).
void matmul(const ConvProblem& problem, bool trans_a, bool trans_b, const void* a, const void* b, const void* bias,
            void* c, const Options& options, Plan* used = nullptr, RunStats* stats = nullptr);
// The same over sub-matrices of larger row-major arrays: lda, ldb, ldc are the row strides of a, b
// and c as stored (elements, at least the stored row length; invalid_argument naming them otherwise).
void matmul(const ConvProblem& problem, bool trans_a, bool trans_b, const void* a, int64_t lda, const void* b,
            int64_t ldb, const void* bias, void* c, int64_t ldc, const Options& options, Plan* used = nullptr,
            RunStats* stats = nullptr);

// Batch normalization (batchnorm_problem: problem.hpp).
// The problem's alpha and beta (1 and 0 as made) blend y (dx) as cuDNN does: y = alpha * BN(x) +
// beta * y, beta == 0 never reading y. x, dy, y and dx have problem.dtype (float32, float16 or
// bfloat16); the per-channel tensors are float32 host memory (as cuDNN takes them for half x), and
// the statistics and reductions accumulate in float32 or wider whatever the dtype.
Plan plan_batchnorm(const ConvProblem& problem, const Options& options);

// y = (x - mean) * invstd * scale + bias with the batch's statistics (biased variance), in two
// passes over x: per-chunk (mean, M2) merged on the host in float64 (Chan et al.), then apply.
// saved_mean, saved_invstd: [c] outputs. running_mean / running_var ([c], both or neither) are
// updated in place like torch: r = (1 - momentum) * r + momentum * stat, unbiased variance.
// y may be null: only the statistics are computed (the first pass).
void batchnorm_forward_training(const ConvProblem& problem, const void* x, const float* scale, const float* bias,
                                double eps, double momentum, float* running_mean, float* running_var, void* y,
                                float* saved_mean, float* saved_invstd, const Options& options, Plan* used = nullptr,
                                RunStats* stats = nullptr);
// y = (x - mean) / sqrt(var + eps) * scale + bias, one pass.
void batchnorm_forward_inference(const ConvProblem& problem, const void* x, const float* scale, const float* bias,
                                 const float* mean, const float* var, double eps, void* y, const Options& options,
                                 Plan* used = nullptr, RunStats* stats = nullptr);
// Gradients of the training forward: pass 1 reduces sum(dy) and sum(dy * xhat) per channel
// (dbias, dscale), pass 2 computes dx.
void batchnorm_backward(const ConvProblem& problem, const void* x, const void* dy, const float* scale,
                        const float* saved_mean, const float* saved_invstd, void* dx, float* dscale, float* dbias,
                        const Options& options, Plan* used = nullptr, RunStats* stats = nullptr);

}  // namespace ooc
