// The planner of the element-wise and per-position layers (layers.hpp): tiles [n, c, spatial...]
// into disjoint boxes, splitting outer dimensions first (so chunks are long contiguous runs), never
// splitting the dimensions an operation reduces over. No halos, no accumulation.
#pragma once

#include <array>

#include "plan/planner.hpp"

namespace ooc {

struct LayerPlanSpec {
  int full_inputs = 1;                     // inputs shaped like the output, streamed per chunk
  bool reads_output = false;               // the output is loaded first (add_tensor in place with beta != 0)
  std::array<bool, 5> splittable{true, true, true, true, true};  // n, c, spatial 0..2
  bool has_broadcast = false;              // add_tensor's a: a box per chunk, 1 along broadcast dims
  std::array<bool, 5> broadcast_full{};    // dims where a is as large as the output
  const char* whole = nullptr;             // what must stay whole (for the out-of-budget message)
};

// One spatial dim of a pooling chunk: the x rows loaded and the y rows computed, cuDNN padding
// `padding` symmetrically around the loaded rows. A split padded dim keeps that padding: the chunk
// loads from m = ceil(padding / stride) outputs before its tile (so computed windows line up with
// the tile's; fewer at the low border) to the tile's last window, clipped to the tensor, where
// the padding then is the real border. Computed rows outside the tile (the first m, and any past
// it) read only virtual padding or missing rows and are never written back; the tile's own windows
// see exactly the real tensor plus its true border padding: -inf for max, uncounted for
// avg_exclude_pad, as cuDNN pads. `tile`: the y rows wanted, of `out`; x has `in` rows.
struct PoolRows {
  Range x, y;
};
PoolRows pool_rows(Range tile, int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding);

// Pooling: tiles y over n, c and the spatial dims without padding; x tiles carry the window halo.
Plan plan_pool(const ConvProblem& problem, const PlannerConfig& config);

// Pooling backward: tiles dx (n, c, unpadded spatial dims) disjointly; chunks as backward data's.
Plan plan_pool_backward_for(const ConvProblem& problem, const PlannerConfig& config);

Plan plan_layer(const ConvProblem& problem, const LayerPlanSpec& spec, const PlannerConfig& config);

}  // namespace ooc
