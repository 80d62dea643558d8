// The CUDA backend knows pointer kinds (cudaPointerGetAttributes); this passes its answers up and
// copies by them.
#include "api/memory_kind.hpp"

#include <cstring>

#include "api/cuda_status.hpp"
#include "backend/cuda/device_scope.hpp"
#include "backend/cuda/pointer_kind.hpp"

namespace ooc::api {

bool is_device_memory(const void* ptr) noexcept { return ooc::is_device_memory(ptr); }

bool is_pinned_host_memory(const void* ptr) noexcept {
  return ooc::is_device_accessible(ptr) && !ooc::is_device_memory(ptr);
}

namespace {

void copy_any(void* dst, const void* src, size_t bytes, const void* device_side) {
  if (bytes == 0) return;
  const int device = ooc::device_memory_ordinal(device_side);
  if (device < 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  DeviceScope on(device);
  OOC_API_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  // From pageable memory cudaMemcpy may return before the DMA has landed, and the caller's next
  // work may be on a stream that does not wait for the legacy one.
  OOC_API_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

void copy_to_host(void* host, const void* src, size_t bytes) { copy_any(host, src, bytes, src); }

void copy_from_host(void* dst, const void* host, size_t bytes) { copy_any(dst, host, bytes, dst); }

}  // namespace ooc::api
