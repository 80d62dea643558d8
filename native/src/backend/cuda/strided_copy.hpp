// Issues one StridedCopy (backend.hpp) as the fewest CUDA copies that express it: a plain copy
// when it is contiguous, else a 2-D or 3-D pitched copy, else (pitch beyond the device's limit,
// or slices that are not whole rows) a loop of smaller ones.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "backend/backend.hpp"

namespace ooc {

// Asynchronous on `stream`; cudaMemcpyDefault, so either side may be host, device or managed.
// max_pitch: cudaDevAttrMaxPitch. Throws cuda_error.
void issue_strided_copy(const StridedCopy& copy, size_t max_pitch, cudaStream_t stream);

}  // namespace ooc
