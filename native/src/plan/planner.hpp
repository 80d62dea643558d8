// The planners: enumerate candidate splits and loop orders for a problem, keep those whose peak
// device bytes fit the budget (and whose every chunk stays under 2^31 elements), rank them with
// the cost model and expand the best into its chunk list.
#pragma once

#include <string>

#include "ooc/plan.hpp"
#include "ooc/problem.hpp"

namespace ooc {

struct PlannerConfig {
  size_t memory_limit = 0;        // device bytes the plan may use at peak, workspace included
  size_t workspace_bytes = 0;     // allowance reserved for convolution algorithms
  size_t workspace_max = 0;       // the chosen plan's workspace grows into its unused budget up to this
  double filter_workspace_per_x_byte = 0;  // backward filter reserves this much workspace per byte of x chunk
  MachineModel machine;
  std::string backend = "host";
  MathMode math = MathMode::fp32;  // Options::math: not read by the search, recorded in the plan
};

// Throws out_of_budget (saying what the smallest plan needs) when nothing fits.
Plan plan_conv_forward_for(const ConvProblem& problem, const PlannerConfig& config);
// Backward data, filter and bias (backward_planner.cpp), same contract.
Plan plan_conv_backward_for(const ConvProblem& problem, const PlannerConfig& config);
// Any operation: dispatches on problem.op.
Plan plan_for(const ConvProblem& problem, const PlannerConfig& config);

// Largest element count one chunk tensor may have: cuDNN's legacy descriptors hold int.
constexpr int64_t kMaxChunkElements = (int64_t{1} << 31) - 1;

}  // namespace ooc
