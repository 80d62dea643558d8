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

// Pooling: tiles y over n, c and the spatial dims without padding; x tiles carry the window halo.
Plan plan_pool(const ConvProblem& problem, const PlannerConfig& config);

// Pooling backward: tiles dx (n, c, unpadded spatial dims) disjointly; chunks as backward data's.
Plan plan_pool_backward_for(const ConvProblem& problem, const PlannerConfig& config);

Plan plan_layer(const ConvProblem& problem, const LayerPlanSpec& spec, const PlannerConfig& config);

}  // namespace ooc
