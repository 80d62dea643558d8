// What the host workers' gather/scatter of pageable tensors costs a plan. Pinned (or registered, or
// device) memory moves by DMA alone; pageable memory is staged through pinned buffers by host
// threads, which bounds a link-bound layer when its big tensors are pageable. A call mixes them
// (pinned activations with a pageable weight): only the pageable share of its bytes is staged.
#pragma once

#include <functional>
#include <initializer_list>

#include "ooc/problem.hpp"
#include "plan/planner.hpp"

namespace ooc {

// A host tensor of a call: its data (nullptr: absent) and size in bytes.
struct HostTensor {
  const void* data;
  double bytes;
};

double x_bytes(const ConvProblem& p);
double w_bytes(const ConvProblem& p);
double y_bytes(const ConvProblem& p);
double bias_bytes(const ConvProblem& p);  // K values

// `config` with the host gather/scatter rate scaled to the share of the tensors' bytes that are not
// `direct` (pageable): staged bytes / rate = all bytes / (rate * all / staged). Infinite (no
// staging cost) when every tensor is direct.
PlannerConfig with_staged_share(PlannerConfig config, std::initializer_list<HostTensor> tensors,
                                const std::function<bool(const void*)>& direct);

}  // namespace ooc
