// A gradient reduced over every chunk (dw, db) accumulates in float32 whatever its tensors' dtype:
// the API hands the run a float32 view of the caller's output and converts at the end. The
// conversion itself is here too, for the C API's host-side work on half data (it may not reach
// the backend's element access directly).
#pragma once

#include <cstdint>
#include <vector>

#include "ooc/problem.hpp"

namespace ooc {

// dst[i] = src[i] converted, for `count` elements of the two dtypes (host memory, not
// overlapping; rounding to nearest even: backend/element_access.hpp).
void convert_elements(DType from, const void* src, DType to, void* dst, int64_t count);

// Runs `run(float* out)` on a float32 view of `output` (`elements` of p.dtype): the caller's own
// array in float32; for a half-precision call a float32 copy (beta's prior values converted in,
// the result converted back), so that the sum accumulates in float32 across chunks.
template <typename Run>
void with_float32_output(const ConvProblem& p, void* output, int64_t elements, Run run) {
  if (p.dtype == DType::float32) return run(static_cast<float*>(output));
  std::vector<float> accumulator(static_cast<size_t>(elements));
  if (p.beta != 0.0) convert_elements(p.dtype, output, DType::float32, accumulator.data(), elements);
  run(accumulator.data());
  convert_elements(DType::float32, accumulator.data(), p.dtype, output, elements);
}

}  // namespace ooc
