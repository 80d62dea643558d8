// Convolution index arithmetic, in one place: output sizes and the input region (halo included)
// that an output region reads. Used by the problem checks, the planner and the tests.
#pragma once

#include <cstdint>

#include "ooc/plan.hpp"

namespace ooc {

// Output extent of one spatial dimension; <= 0 when the kernel does not fit the padded input.
inline int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t padded = in + 2 * padding;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

// Input indices (unpadded coordinates, may be < 0 or >= in: those read zeros) that output rows
// [out.begin, out.end) read: the slab widened by the halo (out-1)*stride + (kernel-1)*dilation + 1.
inline Range conv_input_range(Range out, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t begin = out.begin * stride - padding;
  const int64_t extent = (out.size() - 1) * stride + (kernel - 1) * dilation + 1;
  return Range{begin, begin + extent};
}

}  // namespace ooc
