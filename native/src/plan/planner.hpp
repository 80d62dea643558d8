// The planner: enumerates candidate splits and loop orders for a problem, keeps those whose peak
// device bytes fit the budget (and whose every chunk stays under 2^31 elements), ranks them with
// the cost model and expands the best into its chunk list.
#pragma once

#include <string>

#include "ooc/plan.hpp"
#include "ooc/problem.hpp"

namespace ooc {

struct PlannerConfig {
  size_t memory_limit = 0;        // device bytes the plan may use at peak, workspace included
  size_t workspace_bytes = 0;     // allowance reserved for convolution algorithms
  MachineModel machine;
  std::string backend = "host";
};

// Throws out_of_budget (saying what the smallest plan needs) when nothing fits.
Plan plan_conv_forward_for(const ConvProblem& problem, const PlannerConfig& config);

// Largest element count one chunk tensor may have: cuDNN's legacy descriptors hold int.
constexpr int64_t kMaxChunkElements = (int64_t{1} << 31) - 1;

}  // namespace ooc
