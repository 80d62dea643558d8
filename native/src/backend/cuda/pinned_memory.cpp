#include "backend/cuda/pinned_memory.hpp"

#include <algorithm>

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

void* pinned_host_alloc(size_t bytes) {
  void* ptr = nullptr;
  OOC_CUDA_CHECK(cudaHostAlloc(&ptr, std::max<size_t>(bytes, 1), cudaHostAllocPortable));
  return ptr;
}

void pinned_host_free(void* ptr) noexcept {
  if (ptr) cuda_detail::ignore_cuda_error(cudaFreeHost(ptr));
}

void pinned_host_register(void* ptr, size_t bytes) {
  OOC_CUDA_CHECK(cudaHostRegister(ptr, std::max<size_t>(bytes, 1), cudaHostRegisterPortable));
}

void pinned_host_unregister(void* ptr) { OOC_CUDA_CHECK(cudaHostUnregister(ptr)); }


}  // namespace ooc
