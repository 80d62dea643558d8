// Runs layers.hpp's plans through the chunk pipeline: GEMM in one pass; batch norm in one
// (inference) or two (training, backward: per-chunk statistics, merged on the host in float64,
// then a per-channel affine pass).
#pragma once

#include "exec/chunk_pipeline.hpp"

namespace ooc {

// lda, ldb, ldc: each matrix's row stride as stored, in elements (its row length when packed).
RunStats run_matmul(const Plan& plan, Backend& backend, bool trans_a, bool trans_b, const void* a, int64_t lda,
                    const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, ThreadPool& pool);

struct BatchnormTensors {
  // x, dy and out have the problem's dtype; the per-channel parameters and statistics are float32.
  const void *x = nullptr, *dy = nullptr;
  const float *scale = nullptr, *bias = nullptr;
  const float *mean = nullptr, *var = nullptr;            // inference: the statistics to use
  const float *saved_mean = nullptr, *saved_invstd = nullptr;  // backward: the forward's
  void* out = nullptr;                                    // y or dx (training: null for statistics only)
  float *out_mean = nullptr, *out_invstd = nullptr;       // training: saved_mean, saved_invstd
  float *running_mean = nullptr, *running_var = nullptr;  // training, optional
  float *dscale = nullptr, *dbias = nullptr;              // backward
  double eps = 1e-5, momentum = 0.1;
};
RunStats run_batchnorm(const Plan& plan, Backend& backend, const BatchnormTensors& t, ThreadPool& pool);

}  // namespace ooc
