// Pieces every planner shares: tile candidates, slot sizes, copy-run lengths, the out-of-budget
// report, the plan's common fields and the workspace fallback (the search: candidate_search.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ooc/errors.hpp"
#include "ooc/problem.hpp"
#include "plan/planner.hpp"
#include "plan/shape_format.hpp"

namespace ooc::planner_parts {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Device slots start on 256-byte boundaries (cuDNN's preferred alignment); sizes include the padding.
inline size_t slot_bytes(int64_t elements, double element_size) {
  const size_t bytes = static_cast<size_t>(elements * element_size);
  return (bytes + 255) / 256 * 256;
}

// The bias (forward, GEMM) stays on the device whole, in one slot.
inline size_t bias_slot(const ConvProblem& p) {
  return p.has_bias ? slot_bytes(p.k, static_cast<double>(dtype_size(p.dtype))) : 0;
}

// Tile sizes worth trying for an extent: E / 1, 2, 4, 8, ... rounded up, and 1 (distinct values).
inline std::vector<int64_t> candidate_tiles(int64_t extent) {
  std::vector<int64_t> tiles;
  for (int64_t parts = 1; parts < extent; parts *= 2) tiles.push_back(ceil_div(extent, parts));
  tiles.push_back(1);
  tiles.erase(std::unique(tiles.begin(), tiles.end()), tiles.end());
  return tiles;
}

// Length in elements of the contiguous runs a box is copied in: trailing dims taken whole merge
// into one run, the first split dim (from the inside) ends it.
inline int64_t contiguous_run(const std::array<int64_t, 5>& box_extent, const std::array<int64_t, 5>& tensor_extent) {
  int64_t run = 1;
  for (int d = 4; d >= 0; --d) {
    run *= box_extent[d];
    if (box_extent[d] != tensor_extent[d]) break;
  }
  return run;
}

// A box a chunk copies and the extents of the tensor it is cut from.
struct CopyRegion {
  std::array<int64_t, 5> box, tensor;
};

// The shortest contiguous run, in bytes, of the regions a chunk copies: what the cost model
// charges short copies by (TrafficEstimate::copy_run_bytes).
inline double shortest_run_bytes(double element_size, std::initializer_list<CopyRegion> regions) {
  int64_t shortest = std::numeric_limits<int64_t>::max();
  for (const CopyRegion& r : regions) shortest = std::min(shortest, contiguous_run(r.box, r.tensor));
  return element_size * static_cast<double>(shortest);
}

// Thrown when no candidate fits: says what the smallest plan needs (smallest_peak: the least
// peak seen; max() when every candidate broke the 2^31-element limit) and, for an operation that
// never splits some dimensions (kept_whole: what must stay whole), why.
[[noreturn]] inline void throw_out_of_budget(const ConvProblem& p, size_t budget, size_t smallest_peak,
                                             bool with_workspace, const char* kept_whole = nullptr) {
  const bool none = smallest_peak == std::numeric_limits<size_t>::max();
  std::ostringstream msg;
  msg << "memory_limit of " << format_bytes(static_cast<double>(budget)) << " is too small for " << p.describe()
      << ": ";
  if (kept_whole && !none) msg << kept_whole << " must fit on the device whole, and ";
  msg << "the smallest plan needs ";
  if (none)
    msg << "chunks of more than 2^31 elements";
  else
    msg << format_bytes(static_cast<double>(smallest_peak)) << " (" << smallest_peak << " bytes"
        << (with_workspace ? ", workspace allowance included" : "") << ")";
  throw out_of_budget(msg.str(), smallest_peak);
}

// A plan with what every planner sets alike: the problem, the configuration's backend, machine
// and budget, and the chosen candidate's workspace, peak, traffic and predicted time.
inline Plan plan_with_totals(const ConvProblem& p, const PlannerConfig& config, size_t workspace, size_t peak,
                             double bytes_h2d, double bytes_d2h, double seconds) {
  Plan plan;
  plan.problem = p;
  plan.backend = config.backend;
  plan.math = config.math;
  plan.machine = config.machine;
  plan.memory_limit = config.memory_limit;
  plan.workspace_bytes = workspace;
  plan.peak_device_bytes = peak;
  plan.bytes_h2d = static_cast<size_t>(bytes_h2d);
  plan.bytes_d2h = static_cast<size_t>(bytes_d2h);
  plan.predicted_seconds = seconds;
  return plan;
}

// The slots of a plan that streams x- and w-shaped tensors (w_resident: w is loaded once and stays).
inline void set_x_w_slots(Plan& plan, int x_slots, size_t x_slot_bytes, int w_slots, size_t w_slot_bytes,
                          bool w_resident) {
  plan.x_buffers = x_slots;
  plan.x_slot_bytes = x_slot_bytes;
  plan.w_buffers = w_slots;
  plan.w_slot_bytes = w_slot_bytes;
  plan.w_resident = w_resident;
}

// The fused planners whose loop nests keep K (or C) whole on the device have no group
// dimension yet: a grouped problem is refused naming the argument and what serves it.
inline void require_ungrouped(const ConvProblem& p, const char* function, const char* instead) {
  if (p.groups != 1)
    throw not_supported(std::string(function) + ": groups > 1 is not supported yet (got groups=" +
                        std::to_string(p.groups) + "); " + instead + " take groups");
}

// The same for asymmetric padding (padding='same' with an even kernel): those planners let cuDNN
// pad the dimensions they keep whole, and cuDNN's padding is symmetric.
inline void require_symmetric_padding(const ConvProblem& p, const char* function) {
  for (int d = 0; d < p.spatial_dims; ++d)
    if (!p.symmetric_padding(d))
      throw not_supported(std::string(function) + ": asymmetric padding (padding='same' with an even kernel) is "
                          "not supported yet; pad explicitly or use an odd kernel");
}

// Algorithms may use workspace, but every one also has a zero-workspace fallback: when the
// allowance leaves no room for any plan, plan again without it.
template <typename PlanFn>
Plan with_workspace_fallback(const PlannerConfig& config, PlanFn plan) {
  if (config.workspace_bytes == 0) return plan(config);
  try {
    return plan(config);
  } catch (const out_of_budget&) {
    PlannerConfig without = config;
    without.workspace_bytes = 0;
    return plan(without);
  }
}

// The planner ranks plans with the workspace allowance reserved; the budget the chosen plan leaves
// unused goes to the workspace too (up to config.workspace_max), so that cuDNN may pick algorithms
// such as Winograd or FFT whose workspace grows with the chunk. A plan without workspace (the
// zero-workspace fallback, or an operation that needs none) stays without.
inline Plan with_grown_workspace(Plan plan, const PlannerConfig& config) {
  if (plan.workspace_bytes == 0 || config.workspace_max <= plan.workspace_bytes) return plan;
  if (plan.peak_device_bytes >= plan.memory_limit) return plan;
  const size_t extra =
      std::min(plan.memory_limit - plan.peak_device_bytes, config.workspace_max - plan.workspace_bytes) / 256 * 256;
  plan.workspace_bytes += extra;
  plan.peak_device_bytes += extra;
  return plan;
}

}  // namespace ooc::planner_parts
