// The CUDA backend knows pointer kinds (cudaPointerGetAttributes); this only passes its answers up.
#include "api/memory_kind.hpp"

#include "backend/cuda/pointer_kind.hpp"

namespace ooc::api {

bool is_device_memory(const void* ptr) noexcept { return ooc::is_device_memory(ptr); }

bool is_pinned_host_memory(const void* ptr) noexcept {
  return ooc::is_device_accessible(ptr) && !ooc::is_device_memory(ptr);
}

}  // namespace ooc::api
