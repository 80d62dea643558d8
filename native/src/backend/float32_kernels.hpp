// Tensor data crosses the Backend interface untyped (void*), each chunk descriptor carrying its
// dtype. A kernel that reads float32 only (the cuda backend's own activations, the modes cuDNN
// lacks; the host backend has a kernel for every dtype) checks the chunk's dtype here before it
// reads elements, so a chunk of another dtype is refused, naming it, rather than misread.
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
