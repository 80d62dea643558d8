// Runs layers.hpp's plans through the chunk pipeline: GEMM in one pass; batch norm in one
// (inference) or two (training, backward: per-chunk statistics, merged on the host in float64,
// then a per-channel affine pass). Batch norm's passes are also separate steps (BatchnormPasses),
// so that a call spread over several devices runs the statistics pass on every device, merges
// once, then runs the apply pass on every device.
#pragma once

#include <vector>

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

// Batch norm's two passes and the host step between them, for the whole plan or shares of it
// (plan/device_shares.hpp: contiguous runs of its chunks, each chunk its own reduction group):
// statistics() on every share (each chunk writes its own row of one table, indexed by its place
// in the whole plan, so shares on several devices write disjoint rows), merge() once (float64,
// in the whole plan's chunk order: the result is the one device's, bit for bit, however the
// chunks were shared out), then apply() on every share. Inference has no statistics: apply() alone.
class BatchnormPasses {
 public:
  // `whole` and `t` must outlive this object.
  BatchnormPasses(const Plan& whole, const BatchnormTensors& t);
  bool has_statistics() const { return !table_.empty(); }
  bool applies() const { return t_.out != nullptr; }  // training may ask for the statistics only
  RunStats statistics(const Plan& share, Backend& backend, ThreadPool& pool);
  // Writes the per-channel results (saved statistics and running averages, or dscale and dbias)
  // and the apply pass's coefficients.
  void merge();
  RunStats apply(const Plan& share, Backend& backend, ThreadPool& pool) const;

 private:
  OperationSpec base_spec(const Plan& share, void* out) const;

  const Plan& whole_;
  const BatchnormTensors& t_;
  const bool backward_;
  std::vector<double> table_;       // [chunks, C, 2]: each chunk's moments or gradient sums
  std::vector<float> mean_invstd_;  // backward: the forward's statistics, resident
  std::vector<float> coef_;         // the apply pass's per-channel coefficients, alpha folded in
};
// The passes in order on one device.
RunStats run_batchnorm(const Plan& plan, Backend& backend, const BatchnormTensors& t, ThreadPool& pool);

}  // namespace ooc
