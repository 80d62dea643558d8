// One call over several devices (Options::devices): the plan's chunk list cut into each device's
// share. Pure data, no CUDA: each share is a plan of its own (the same slots, peak and budget,
// since every device holds one chunk pipeline) over a contiguous run of the chunks, so the loop
// order's reuse (a resident w, an x tile kept across k tiles) survives inside a share.
//
// A reduction group is a run of chunks from a first_c chunk to the next last_c one: they
// accumulate one output tile on the device. Shares hold whole groups, so each output tile is
// written by one device and nothing needs combining. Only a plan with a single group (dw or db
// reduced over every chunk, say) has that group split, when the operation can add partial sums:
// share 0 then runs with the caller's beta into the output, every other share (`partial`) with
// beta 0 into a zeroed buffer that is added to the output once all have run.
//
// Shares are balanced by chunk count weighted by each device's modelled speed (device_speeds: a
// device the cost model finds twice as fast gets about twice the chunks; equal devices equal
// shares).
#pragma once

#include <vector>

#include "ooc/plan.hpp"

namespace ooc {

struct DeviceShare {
  Plan plan;
  bool partial = false;  // a part of the one reduction group after its first: beta 0, summed into the output
};

// At most weights.size() shares (fewer where the plan has fewer groups and cannot split one; then
// the first devices get them), none empty, covering plan.chunks in order; share i is device i's,
// sized in proportion to weights[i] (positive and finite). can_split_group: the operation adds
// partial sums (its run can write into another buffer).
std::vector<DeviceShare> device_shares(const Plan& plan, const std::vector<double>& weights, bool can_split_group);
// `devices` equally fast devices.
std::vector<DeviceShare> device_shares(const Plan& plan, int devices, bool can_split_group);

// Each machine's speed at this plan: the inverse of the cost model's seconds for the plan's link
// traffic, flops and chunks on it (cost_model.hpp's layer estimate: out-of-core work is
// link-bound, so the link figures weigh most). Equal machines get equal speeds.
std::vector<double> device_speeds(const Plan& plan, const std::vector<MachineModel>& machines);

}  // namespace ooc
