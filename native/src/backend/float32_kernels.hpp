// Tensor data crosses the Backend interface untyped (void*), each chunk descriptor carrying its
// dtype. Both backends' kernels are float32 today: a backend checks the chunk's dtype here before
// it reads elements, so a chunk of another dtype is refused rather than misread, and the precision
// work adds kernels behind this check, not plumbing.
#pragma once

#include <string>

#include "ooc/errors.hpp"
#include "ooc/problem.hpp"

namespace ooc::float32_kernels {

template <typename ChunkShape>
void require(const ChunkShape& shape, const char* backend, const char* op) {
  if (shape.dtype != DType::float32)
    throw not_supported(std::string(backend) + " backend: " + op + " has no " + dtype_name(shape.dtype) + " kernel");
}
inline const float* f(const void* data) { return static_cast<const float*>(data); }
inline float* f(void* data) { return static_cast<float*>(data); }

}  // namespace ooc::float32_kernels
