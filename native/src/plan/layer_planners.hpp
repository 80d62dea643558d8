// Planners of layers.hpp's operations: GEMM (gemm_planner.cpp) and batch norm (batchnorm_planner.cpp).
#pragma once

#include "plan/planner.hpp"

namespace ooc {

// 2D blocking of c[M, N] (tiles: n = M rows, k = N columns) with K split into tiles c accumulated on
// the device (first_c: the caller's beta, then 1); tiles and loop order chosen by the cost model.
Plan plan_matmul_for(const ConvProblem& problem, const PlannerConfig& config);
// Tiles of x over n, c and space; every chunk independent (k: the chunk's row in the per-chunk
// statistics table). passes: 1 (inference) or 2 (training, backward: reduce, then apply).
Plan plan_batchnorm_for(const ConvProblem& problem, const PlannerConfig& config);

// Batch norm's per-chunk statistics rows are float64 whatever x's dtype (a chunk's partial sums keep
// their digits into the merge, where a sum that cancels would magnify a float32 rounding of each),
// its per-channel coefficients float32 (what the kernels apply).
constexpr size_t kBatchnormPartialBytes = sizeof(double);
constexpr size_t kBatchnormCoefBytes = sizeof(float);

}  // namespace ooc
