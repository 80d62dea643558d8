// The cost model's figures for the cuda backend.
#pragma once

#include "ooc/plan.hpp"

namespace ooc {

// H200 figures (docs/ARCHITECTURE.md, "Machine figures": pinned H2D 54 GB/s, D2H 55 GB/s, both at once 88 GB/s,
// 20 TFLOP/s FP32 convolution), each overridable by OOC_H2D_GBPS, OOC_D2H_GBPS, OOC_BIDIR_GBPS,
// OOC_TFLOPS for other GPUs. Throws ooc::invalid_argument for a set variable that is not a
// positive number.
MachineModel cuda_machine_model_from_env();

}  // namespace ooc
