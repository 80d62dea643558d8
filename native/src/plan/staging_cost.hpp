// What the host workers' gather/scatter of pageable tensors costs a plan. Pinned (or registered, or
// device) memory moves by DMA alone; pageable memory is staged through pinned buffers by host
// threads, which bounds a link-bound layer when its big tensors are pageable.
//
// A call that mixes them is planned as pageable. Planning by the pageable share of the bytes was
// tried (d103c65) and measured on the H200: pinned x and y with a pageable 2 MB w then planned VGG's
// 3x3 layer in 42-sample chunks, too large for Winograd's workspace, at 189 ms against 94 ms for the
// pageable plan's 11-sample chunks. The cost model does not yet know how algorithm workspace grows
// with the chunk (bench/NOTES.md); until it does, the all-or-nothing rule keeps the measured plans.
#pragma once

#include <functional>
#include <vector>

#include "plan/planner.hpp"

namespace ooc {

// `config` without host staging cost (an infinite gather/scatter rate) when every tensor given
// (nullptr: absent) is `direct`; unchanged otherwise.
PlannerConfig with_host_staging(PlannerConfig config, const std::vector<const void*>& tensors,
                                const std::function<bool(const void*)>& direct);

}  // namespace ooc
