// Armed by ooc::testing::inject_fault (ooc.hpp): makes the n-th next operation of one kind fail as
// if CUDA, cuDNN or cuBLAS had, so tests can prove that error paths drain the queues and free
// everything. Plain process-wide counters: compiles, links and arms without a GPU. Backend::issue
// consults them once per operation (the cuda backend always, the host backend only after
// ooc::testing::set_host_fault_injection(true)).
#pragma once

#include <cstdint>
#include <string>

namespace ooc {

// The kinds of operation a fault can be armed for: one per family of Backend operations
// (backend.hpp's wrappers say which operation counts as which). fault_injection.cpp maps each to
// its inject_fault name and to the exception its real failure would raise.
enum class FaultSite { copy, conv, gemm, batchnorm, activation, softmax, pool, add, device_copy };
constexpr int kFaultSiteCount = static_cast<int>(FaultSite::device_copy) + 1;  // device_copy: the last

// Called before issuing the work: throws what the library doing that work would (cuda_error or
// cudnn_error) when this call is the armed one, and disarms. `operation` names the call in the message.
void throw_if_fault_injected(FaultSite site, const char* operation);

// Arms the site named `where` ("copy", "conv", ...) for its countdown-th next operation; countdown
// <= 0 disarms. invalid_argument naming the valid sites otherwise.
void arm_fault(const std::string& where, int64_t countdown);

}  // namespace ooc
