// Where a caller's pointer lives, for the layers above the backends (the C API): they decide by it
// whether cuDNN can take a tensor as it is and how to copy or free it, without depending on the
// CUDA backend that answers.
#pragma once

#include <cstddef>

namespace ooc::api {

// Device or managed memory: what cuDNN and cuBLAS can read themselves. False for host memory of
// any kind and whenever CUDA cannot tell (no GPU or driver, a null pointer). Never throws.
bool is_device_memory(const void* ptr) noexcept;

// Page-locked (or registered) host memory: what cudaHostAlloc returns and cudaFreeHost frees.
// False for device and pageable memory and whenever CUDA cannot tell. Never throws.
bool is_pinned_host_memory(const void* ptr) noexcept;

// Copies between host memory and a caller's memory of any kind: device memory through CUDA (on
// the device that holds it), host memory by memcpy. Complete on return, so the caller's next work
// on any stream sees the bytes. Throws ooc::cuda_error.
void copy_to_host(void* host, const void* src, size_t bytes);
void copy_from_host(void* dst, const void* host, size_t bytes);

}  // namespace ooc::api
