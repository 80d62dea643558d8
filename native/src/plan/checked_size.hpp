// Overflow-checked size arithmetic: every element count, byte count and extent a problem derives
// from the caller's numbers goes through these, so a shape too large to index is refused at
// validation (ooc::invalid_argument naming the argument) instead of wrapping around int64 and
// planning nonsense, dividing by zero or looping for ever later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ooc::checked {

// The largest tensor pyooc indexes, in bytes: far beyond any host memory, and far enough below
// 2^63 that sums and small multiples of tensor sizes (a plan's traffic, a chunk's halo) cannot
// overflow either.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 60;

// a * b and a + b; invalid_argument "<what> is too large (...)" when the result leaves
// [-kMaxTensorBytes, kMaxTensorBytes].
int64_t mul(int64_t a, int64_t b, const std::string& what);
int64_t add(int64_t a, int64_t b, const std::string& what);

// The element count of a tensor of `shape` (positive dims), refused with invalid_argument naming
// `name` when its bytes pass kMaxTensorBytes.
int64_t tensor_elements(const std::vector<int64_t>& shape, size_t element_size, const std::string& name);

// A window parameter every chunk hands the kernels as an int (stride, dilation, a pooling kernel:
// cuDNN's descriptors): invalid_argument naming `name` when it passes 2^31 - 1, at validation and
// on every backend alike, rather than a runtime error from the cuda backend alone. (A padding
// needs no such bound: a dimension padded that far is split, and chunks pad with explicit zeros.)
void kernel_int(int64_t value, const std::string& name);

}  // namespace ooc::checked
