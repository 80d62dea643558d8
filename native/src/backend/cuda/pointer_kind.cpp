#include "backend/cuda/pointer_kind.hpp"

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

bool is_device_accessible(const void* host_ptr) noexcept {
  if (!host_ptr) return false;
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, host_ptr);
  if (status != cudaSuccess) {
    // Older runtimes report unregistered memory as cudaErrorInvalidValue; either way it is pageable.
    cuda_detail::clear_last_cuda_error();
    return false;
  }
  switch (attributes.type) {
    case cudaMemoryTypeHost:
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return true;
    default: return false;  // cudaMemoryTypeUnregistered
  }
}

}  // namespace ooc
