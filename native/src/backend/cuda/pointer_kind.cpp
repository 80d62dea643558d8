#include "backend/cuda/pointer_kind.hpp"

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

namespace {

// type cudaMemoryTypeUnregistered when CUDA cannot tell (or the pointer is null).
cudaPointerAttributes attributes_of(const void* ptr) noexcept {
  cudaPointerAttributes attributes{};
  attributes.type = cudaMemoryTypeUnregistered;
  if (!ptr) return attributes;
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    // Older runtimes report unregistered memory as cudaErrorInvalidValue; either way it is pageable.
    cuda_detail::clear_last_cuda_error();
    attributes = cudaPointerAttributes{};
    attributes.type = cudaMemoryTypeUnregistered;
  }
  return attributes;
}

cudaMemoryType memory_type(const void* ptr) noexcept { return attributes_of(ptr).type; }

}  // namespace

bool is_device_memory(const void* ptr) noexcept {
  const cudaMemoryType type = memory_type(ptr);
  return type == cudaMemoryTypeDevice || type == cudaMemoryTypeManaged;
}

int device_memory_ordinal(const void* ptr) noexcept {
  const cudaPointerAttributes attributes = attributes_of(ptr);
  const bool on_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  return on_device ? attributes.device : -1;
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
