// Host access to the element types of ooc::DType (element_access.hpp: float32, and float16 /
// bfloat16 through CUDA's own conversions), so that the host kernels read and write any dtype
// while computing in float (and double where they reduce). Also the whole-buffer conversion the
// API uses where a reduction keeps float32 while its caller's tensor is half (a dw accumulated over
// every chunk).
#pragma once

#include <cstdint>

#include "backend/element_access.hpp"
#include "ooc/problem.hpp"

namespace ooc::host_elements {

// The loads, rounding stores and type dispatch both backends share (element_access.hpp).
using element_access::load;
using element_access::store;
using element_access::with_type;

// dst[i] = src[i] converted, for `count` elements of the two dtypes (src and dst do not overlap).
void convert(DType from, const void* src, DType to, void* dst, int64_t count);

}  // namespace ooc::host_elements
