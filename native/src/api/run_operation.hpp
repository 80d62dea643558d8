// The one path every operation runs through. A public entry point validates its arguments, then
// describes its call (OperationCall) and hands it to plan_operation (the plan_* twins) or
// run_operation. Here, once for every operation: the process-wide backend options ask for, the
// planner configuration it implies, the pinned rule (a call whose tensors are all device-accessible
// plans without host staging cost: plan/staging_cost.hpp), the plan cache, stats and the plan
// that ran.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "backend/backend.hpp"
#include "plan/plan_cache.hpp"
#include "plan/planner.hpp"
#include "ooc/ooc.hpp"

namespace ooc {

struct OperationCall {
  // Everything the planner reads beyond the configuration: the operation's name, its problem(s)
  // and options (the configuration is added by the run path).
  PlanKey key;
  // The operation's planner for a configuration.
  std::function<Plan(const PlannerConfig&)> plan;
  // Every caller tensor the run reads or writes (nullptr: absent this call); decides the pinned rule.
  std::vector<const void*> tensors;
  // Executes the plan on the backend and returns what it measured (run_operation only).
  std::function<RunStats(const Plan&, Backend&)> run;
  // Options::devices: whether the plan's chunks may be spread over several devices (its reduction
  // groups write disjoint output tiles), and, for an operation whose one output is reduced over
  // every chunk (dw, db), run_into: the run writing into another float32 buffer of
  // output_elements, for a device's partial sum (plan/device_shares.hpp). Absent: whole groups only.
  bool spreads = false;
  std::function<RunStats(const Plan&, Backend&, void* out)> run_into = {};
  int64_t output_elements = 0;
  float* output = nullptr;  // the caller's reduced output, which the partial sums are added to
  // An operation whose device passes meet at a host step (batch norm: the statistics of every
  // chunk merged before the apply pass) spreads through `passes`: made once for the whole plan, it
  // runs `first` on every device's share, `between` once when all have finished, then `second` on
  // every share. Either pass may be absent. Such an operation's shares are whole groups.
  struct Passes {
    std::function<RunStats(const Plan& share, Backend&)> first, second;
    std::function<void()> between;
  };
  std::function<Passes(const Plan& whole)> passes = {};
};

// `call`, marked as one whose chunks may spread over devices (OperationCall::spreads).
inline OperationCall spreading(OperationCall call) {
  call.spreads = true;
  return call;
}

// The plan the call would run, for tensors the caller does not show: pageable ones, or pinned ones
// when options.assume_pinned.
Plan plan_operation(const OperationCall& call, const Options& options);
// Plans (or reuses the plan) for the call's tensors and runs it; `used` and `stats` (when not null)
// receive the plan and what it measured.
void run_operation(const OperationCall& call, const Options& options, Plan* used, RunStats* stats);

// Throws invalid_argument "<function>: null data pointer" when any of `pointers` is null.
void require_data(std::initializer_list<const void*> pointers, const char* function);

}  // namespace ooc
