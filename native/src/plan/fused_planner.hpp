// The planner of the fused backward (fused.hpp's conv_backward_data_filter_bias): dx, dw and db
// from one pass over dy, so that dy crosses the link exactly once.
//
// The loop order: for n-tile { for spatial tile { for c-tile } }, K whole. A dy tile [n, K, rows]
// is loaded once and serves every c-tile: dx[n, c, ...] (which reduces over K, so K stays whole),
// dw[K, c] += dy x x-slab (kept on the device for the whole run, one dense block per c-tile) and
// db[K] += sum of dy (once per dy tile). dw and db reduce over n and space, so they cannot be
// written back per tile: they stay on the device and leave once, after the last chunk.
//
// dx tiling against dw's reduction: dw needs disjoint dy tiles (each dy row counted once); dx needs
// every dy row whose taps reach a dx row, and neighbouring dy tiles reach overlapping dx rows.
// Backward data's own planner tiles dx and loads the dy halo twice; here dy is tiled (along at most
// one spatial dimension, the split one) and the overlap is carried instead: a chunk computes dx over
// its tile's whole reach (padding 0), writes back the rows no later tile reaches (`target`), and
// keeps the rest (the carry) in device scratch; the next tile along that dimension starts its dx
// from them (beta = 1). Carries are per c-tile; a new n-tile starts with none.
#pragma once

#include <string>
#include <vector>

#include "plan/planner.hpp"

namespace ooc {

// problem: a backward-data problem (ConvProblem::backward_data); throws out_of_budget when nothing fits.
// y_inputs: the y-shaped tensors each dy tile loads (1: dy; 2 or 3 when an activation's backward is
// folded in: dy, y and maybe the activation's input); `fused` names the function.
// pool: a pooling folded in (dy = pool_backward(q, dq, y) per tile, pool: pool_problem of y's
// shape): then each tile loads dq and q over the pooled rows reaching its dy rows and y_inputs
// y-shaped tensors (y, the activation's input) over those rows' windows (pooled_rows); dims the
// pooling pads are never split.
Plan plan_conv_backward_data_filter_bias_for(const ConvProblem& problem, const PlannerConfig& config,
                                             int y_inputs = 1,
                                             const std::string& fused = "conv_backward_data_filter_bias",
                                             const ConvProblem* pool = nullptr);

// One spatial dim of a dy tile's rows `dy` when a pooling's backward is folded in: the pooled rows
// whose windows reach them (dq, q), and those windows' y rows, over which pool_backward computes dy
// with `padding` (cuDNN's own where the dimension is whole; 0 where split, as the pooling has none
// there). dy rows no window reaches (stride > kernel) get no gradient: zeros.
struct PooledRows {
  Range pooled, y;
  int64_t padding = 0;
};
PooledRows pooled_rows(const ConvProblem& pool, int d, Range dy, bool whole);

// The planner of conv_bias_activation_pooling_forward (plan/fused_pool_planner.cpp): the forward
// planner's loop nest (for n/spatial tile { for k-tile { for c-tile } }, the reduction innermost)
// over tiles of the pooled output. A pooled tile's windows need whole y rows (layer_planner.hpp's
// pool_rows: aligned to the pooling stride, cuDNN's padding kept at the true borders); the chunk
// computes all of them from the x rows they read (the conv halo), so no window straddles two
// chunks: y rows two tiles' windows share are computed twice, never moved. Chunk fields: out: the y
// rows computed; in: the x rows read; out_read: the pooled rows computed; target: those written
// back. conv: a forward problem (alpha1, alpha2, bias); pool: pool_problem(conv's y shape, ...).
Plan plan_conv_bias_activation_pooling_forward_for(const ConvProblem& conv, const ConvProblem& pool,
                                                   const PlannerConfig& config);

// The element type of the kept dw and db: float32 whatever the tensors' dtype, so that a half
// call's sums over every dy tile round only once, when the API converts them to the caller's dtype.
constexpr DType kKeptDtype = DType::float32;

// Where the kept outputs and the carries live: dw's block of c-tile j (dense [K, c-tile j,
// kernel...], kKeptDtype) at dw_offset[j] and db at db_offset, bytes into the kept memory; c-tile j's carry
// (dense [n-tile, c-tile j, carried rows, other spatial dims]) at carry_offset[j] into the scratch.
// With a pooling folded in, the scratch also holds the tile's dy (dense [n-tile, K, dy rows...], at
// dy_offset) and pool_backward's output over the windows' y rows (at pooled_dy_offset).
struct FusedBackwardLayout {
  int split_dim = -1;  // the spatial dimension split into tiles, -1: none
  std::vector<size_t> dw_offset, carry_offset;
  size_t db_offset = 0, kept_bytes = 0, scratch_bytes = 0;
  size_t dy_offset = 0, pooled_dy_offset = 0;
};
// The layout the planner chose, read back from the plan's slot table (the planner records it there
// as "dw[j]", "db", "carried dx[j]", "dz" and "pooled dy"; nothing is recomputed).
FusedBackwardLayout recorded_layout(const Plan& plan);

}  // namespace ooc
