#include "backend/cuda/pointer_kind.hpp"

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

namespace {

// cudaMemoryTypeUnregistered when CUDA cannot tell (or the pointer is null).
cudaMemoryType memory_type(const void* ptr) noexcept {
  if (!ptr) return cudaMemoryTypeUnregistered;
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess) {
    // Older runtimes report unregistered memory as cudaErrorInvalidValue; either way it is pageable.
    cuda_detail::clear_last_cuda_error();
    return cudaMemoryTypeUnregistered;
  }
  return attributes.type;
}

}  // namespace

bool is_device_memory(const void* ptr) noexcept {
  const cudaMemoryType type = memory_type(ptr);
  return type == cudaMemoryTypeDevice || type == cudaMemoryTypeManaged;
}

bool is_device_accessible(const void* host_ptr) noexcept {
  switch (memory_type(host_ptr)) {
    case cudaMemoryTypeHost:
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return true;
    default: return false;  // cudaMemoryTypeUnregistered
  }
}

}  // namespace ooc
