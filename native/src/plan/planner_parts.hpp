// Pieces every planner shares (planner.cpp: forward; backward_planner.cpp: the gradients): tile
// candidates, slot sizes, copy-run lengths, the out-of-budget report and the workspace fallback.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

#include "ooc/errors.hpp"
#include "ooc/problem.hpp"
#include "plan/cost_model.hpp"
#include "plan/planner.hpp"
#include "plan/shape_format.hpp"

namespace ooc::planner_parts {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Device slots start on 256-byte boundaries (cuDNN's preferred alignment); sizes include the padding.
inline size_t slot_bytes(int64_t elements, double element_size) {
  const size_t bytes = static_cast<size_t>(elements * element_size);
  return (bytes + 255) / 256 * 256;
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

// The most chunks a plan may have (the chunk list is materialized).
constexpr size_t kMaxChunks = size_t{1} << 22;

// Thrown when no candidate fits: says what the smallest plan needs (smallest_peak: the least
// peak seen; max() when every candidate broke the 2^31-element limit).
[[noreturn]] inline void throw_out_of_budget(const ConvProblem& p, size_t budget, size_t smallest_peak,
                                             bool with_workspace) {
  std::ostringstream msg;
  msg << "memory_limit of " << format_bytes(static_cast<double>(budget)) << " is too small for " << p.describe()
      << ": the smallest plan needs ";
  if (smallest_peak == std::numeric_limits<size_t>::max())
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
  plan.machine = config.machine;
  plan.memory_limit = config.memory_limit;
  plan.workspace_bytes = workspace;
  plan.peak_device_bytes = peak;
  plan.bytes_h2d = static_cast<size_t>(bytes_h2d);
  plan.bytes_d2h = static_cast<size_t>(bytes_d2h);
  plan.predicted_seconds = seconds;
  return plan;
}

// A search's best candidate so far (C: a candidate with `peak` and `seconds`): offer() notes the
// smallest peak seen and keeps a candidate that fits `budget` and is predicted faster (ties keep
// the earlier one). Returns whether it was kept.
template <typename C>
struct BestCandidate {
  size_t budget = 0;
  C best{};
  bool found = false;
  size_t smallest_peak = std::numeric_limits<size_t>::max();

  bool offer(C& c, TrafficEstimate t, int buffers, const MachineModel& machine) {
    smallest_peak = std::min(smallest_peak, c.peak);
    if (c.peak > budget) return false;
    t.buffers = buffers;
    c.seconds = predict_seconds(t, machine);
    if (found && !(c.seconds < best.seconds * (1 - 1e-9))) return false;
    best = c;
    found = true;
    return true;
  }
};

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
