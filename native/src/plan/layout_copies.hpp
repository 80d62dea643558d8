// Device room a cuda convolution chunk needs for copies of its x, w and y in the other layout,
// beyond its algorithm's allowance. One rule for the planners (which reserve it in the plan's
// workspace) and the cuda backend (which uses it): docs/layouts.md and docs/dtypes.md say why.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ooc/problem.hpp"

namespace ooc {

enum class LayoutCopies {
  none,
  // Channels-last 3-D: cuDNN has no NDHWC kernel for some channel counts (every forward algorithm
  // NOT_SUPPORTED for a chunk of one input channel, on the H100 and the H200), so the cuda backend
  // computes a chunk it refuses on channels-first copies that it makes in the workspace's tail.
  channels_first_staging,
  // Half precision, channels-first: cuDNN's tensor-core algorithms run on NHWC copies that they
  // make in the workspace. With less room cuDNN's choice falls to slow kernels: bf16 vol3d ran
  // in 0.058 s with 1 GiB of workspace for a 136 MB x chunk (H200), 0.277 s with 232 MB (H100).
  cudnn_tensor_core_copies,
};

// Which copies a convolution chunk of the cuda backend needs (none for the host backend).
inline LayoutCopies layout_copies(bool cuda, Operation op, Layout layout, int spatial_dims, DType dtype) {
  if (!cuda || (op != Operation::forward && op != Operation::backward_data && op != Operation::backward_filter))
    return LayoutCopies::none;
  if (layout == Layout::channels_last) return spatial_dims == 3 ? LayoutCopies::channels_first_staging : LayoutCopies::none;
  // Backward filter's reserve grows with x already (PlannerConfig::filter_workspace_per_x_byte).
  if (dtype != DType::float32 && op != Operation::backward_filter) return LayoutCopies::cudnn_tensor_core_copies;
  return LayoutCopies::none;
}

// The bytes of one chunk's copies: x, w and y in the chunk's dtype, each 256-byte aligned (the
// layout the cuda backend's staging uses).
inline size_t layout_copy_bytes(int64_t x_elements, int64_t w_elements, int64_t y_elements, DType dtype) {
  size_t total = 0;
  for (int64_t elements : {x_elements, w_elements, y_elements})
    total += (static_cast<size_t>(elements) * dtype_size(dtype) + 255) / 256 * 256;
  return total;
}

}  // namespace ooc
