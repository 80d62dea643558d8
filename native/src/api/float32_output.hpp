// A gradient reduced over every chunk (dw, db) accumulates in float32 whatever its tensors' dtype:
// the API hands the run a float32 view of the caller's output and converts at the end. The
// conversion itself is here too, for the C API's host-side work on half data (it may not reach
// the backend's element access directly).
#pragma once

#include <cstdint>
#include <vector>

#include "api/memory_kind.hpp"
#include "ooc/problem.hpp"

namespace ooc {

// dst[i] = src[i] converted, for `count` elements of the two dtypes (host memory, not
// overlapping; rounding to nearest even: backend/element_access.hpp).
void convert_elements(DType from, const void* src, DType to, void* dst, int64_t count);

// Runs `run(float* out)` on a float32 view of `output` (`elements` of p.dtype): the caller's own
// array in float32; for a half-precision call a float32 copy (beta's prior values converted in,
// the result converted back), so that the sum accumulates in float32 across chunks. The
// conversions run on the host: a half `output` in device memory (a device array) is copied to the
// host and back around them (w- or bias-sized: small).
template <typename Run>
void with_float32_output(const ConvProblem& p, void* output, int64_t elements, Run run) {
  if (p.dtype == DType::float32) return run(static_cast<float*>(output));
  const size_t bytes = static_cast<size_t>(elements) * dtype_size(p.dtype);
  std::vector<unsigned char> host_copy(api::is_device_memory(output) ? bytes : 0);
  void* on_host = host_copy.empty() ? output : host_copy.data();
  std::vector<float> accumulator(static_cast<size_t>(elements));
  if (p.beta != 0.0) {
    if (on_host != output) api::copy_to_host(on_host, output, bytes);
    convert_elements(p.dtype, on_host, DType::float32, accumulator.data(), elements);
  }
  run(accumulator.data());
  convert_elements(DType::float32, accumulator.data(), p.dtype, on_host, elements);
  if (on_host != output) api::copy_from_host(output, on_host, bytes);
}

}  // namespace ooc
