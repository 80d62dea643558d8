// The fused functions of fused.hpp: argument checks, plans, runs (exec/fused_pipeline).
#include "ooc/fused.hpp"

#include <algorithm>
#include <initializer_list>
#include <limits>

#include "api/backend_access.hpp"
#include "exec/fused_pipeline.hpp"
#include "exec/thread_pool.hpp"
#include "plan/planner.hpp"

namespace ooc {
namespace {

// The planner configuration for a fused call: when every tensor it is given is pinned (or device)
// memory it moves by DMA alone, so the plan is made without the host gather/scatter cost.
PlannerConfig fused_config(Backend& backend, PlannerConfig config, bool assume_pinned,
                           std::initializer_list<const void*> tensors) {
  const bool all_pinned = std::all_of(tensors.begin(), tensors.end(), [&](const void* t) {
    return !t || backend.host_is_device_accessible(t);
  });
  if (assume_pinned || (tensors.size() > 0 && all_pinned))
    config.machine.host_copy_bytes_per_s = std::numeric_limits<double>::infinity();
  return config;
}

void require_forward(const ConvProblem& p, const char* function) {
  if (p.op != Operation::forward)
    throw invalid_argument(std::string(function) + ": the problem describes " + operation_name(p.op) +
                           " (make it with ConvProblem::forward)");
}

Plan plan_bias_activation(const ConvProblem& p, const PlannerConfig& config) {
  Plan plan = plan_conv_forward_for(p, config);
  plan.fused = "conv_bias_activation_forward";
  return plan;
}

}  // namespace

FusedActivation fused_activation_from_name(const std::string& name, double coef) {
  FusedActivation a;
  a.coef = coef;
  if (name == "identity") {
    a.identity = true;
    return a;
  }
  try {
    a.mode = activation_mode_from_name(name);
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string("activation: 'identity' or ") + e.what());
  }
  return a;
}

Plan plan_conv_bias_activation_forward(const ConvProblem& problem, const Options& options) {
  require_forward(problem, "plan_conv_bias_activation_forward");
  Plan plan;
  with_backend(options, [&](Backend& backend, const PlannerConfig& config) {
    plan = plan_bias_activation(problem, fused_config(backend, config, options.assume_pinned, {}));
  });
  return plan;
}

void conv_bias_activation_forward(const ConvProblem& problem, const FusedActivation& activation, const float* x,
                                  const float* w, const float* z, const float* bias, float* y, const Options& options,
                                  Plan* used, RunStats* stats) {
  require_forward(problem, "conv_bias_activation_forward");
  if (!x || !w || !y || (problem.has_bias && !bias) || (problem.beta != 0.0 && !z))
    throw invalid_argument("conv_bias_activation_forward: null data pointer");
  with_backend(options, [&](Backend& backend, const PlannerConfig& config) {
    const float* z_read = problem.beta != 0.0 ? z : nullptr;
    Plan plan = plan_bias_activation(problem, fused_config(backend, config, false, {x, w, z_read, bias, y}));
    RunStats s =
        run_conv_bias_activation_forward(plan, backend, activation, x, w, z, bias, y, ThreadPool::shared());
    if (stats) *stats = s;
    if (used) *used = std::move(plan);
  });
}

}  // namespace ooc
