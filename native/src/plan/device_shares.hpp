// One call over several devices (Options::devices): the plan's chunk list cut into each device's
// share. Pure data, no CUDA: each share is a plan of its own (the same slots, peak and budget,
// since every device holds one chunk pipeline) over a contiguous run of the chunks, so the loop
// order's reuse (a resident w, an x tile kept across k tiles) survives inside a share.
//
// A reduction group is a run of chunks from a first_c chunk to the next last_c one: they
// accumulate one output tile on the device. Shares hold whole groups, balanced by chunk count, so
// each output tile is written by one device and nothing needs combining. Only a plan with a single
// group (dw or db reduced over every chunk, say) has that group split, when the operation can add
// partial sums: share 0 then runs with the caller's beta into the output, every other share
// (`partial`) with beta 0 into a zeroed buffer that is added to the output once all have run.
#pragma once

#include <vector>

#include "ooc/plan.hpp"

namespace ooc {

struct DeviceShare {
  Plan plan;
  bool partial = false;  // a part of the one reduction group after its first: beta 0, summed into the output
};

// At most `devices` shares (fewer where the plan has fewer groups and cannot split one), none
// empty, covering plan.chunks in order. can_split_group: the operation adds partial sums (its run
// can write into another buffer).
std::vector<DeviceShare> device_shares(const Plan& plan, int devices, bool can_split_group);

}  // namespace ooc
