// Armed by ooc::testing::inject_fault (ooc.hpp): makes the n-th next copy or convolution fail as if
// CUDA/cuDNN had, so tests can prove that error paths drain the queues and free everything. Plain
// process-wide counters: compiles, links and arms without a GPU.
#pragma once

namespace ooc {

enum class FaultSite { copy, conv };

// Called before issuing the work: throws cuda_error (copy) or cudnn_error (conv) when this call
// is the armed one, and disarms. `operation` names the call in the message.
void throw_if_fault_injected(FaultSite site, const char* operation);

}  // namespace ooc
