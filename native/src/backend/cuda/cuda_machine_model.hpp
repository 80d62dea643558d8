// The cost model's figures for the cuda backend.
#pragma once

#include <algorithm>
#include <cstddef>

#include "ooc/plan.hpp"

namespace ooc {

// H200 figures (docs/ARCHITECTURE.md, "Machine figures": pinned H2D 54 GB/s, D2H 55 GB/s, both at once 88 GB/s,
// 20 TFLOP/s FP32 convolution), each overridable by OOC_H2D_GBPS, OOC_D2H_GBPS, OOC_BIDIR_GBPS,
// OOC_TFLOPS for other GPUs. Throws ooc::invalid_argument for a set variable that is not a
// positive number.
MachineModel cuda_machine_model_from_env();

// The cuda backend's workspace rules (Backend::workspace_allowance, workspace_max,
// filter_workspace_per_x_byte), here without CUDA so that plan_* can apply them for a GPU that is
// not present (Options::machine).
namespace cuda_workspace {
// Workspace beyond this buys cuDNN little for the chunk sizes we run, and costs chunk space.
constexpr size_t kMaxBytes = size_t{256} << 20;
// Winograd's transformed tensors of a VGG-sized chunk take a few hundred MiB; FFT more.
constexpr size_t kMaxGrownBytes = size_t{2048} << 20;
// cuDNN's BWD_FILTER_ALGO_1 (measured on the H200 at 9f46ab0: 3.6x faster than ALGO_0/3 on a
// 3-D chunk of 73.5 MB of x) wants 140.8 MB of workspace there, 1.91 bytes per byte of x.
constexpr double kFilterPerXByte = 2.0;

inline size_t allowance(size_t budget) {
  return std::min(budget / 8, kMaxBytes) / 256 * 256;  // keeps arena slots 256-byte aligned
}
inline size_t max(size_t budget) {
  return std::max(allowance(budget), std::min(budget / 2, kMaxGrownBytes) / 256 * 256);
}
}  // namespace cuda_workspace

}  // namespace ooc
