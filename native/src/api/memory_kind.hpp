// Where a caller's pointer lives, for the layers above the backends (the C API): they decide by it
// whether cuDNN can take a tensor as it is and how to copy or free it, without depending on the
// CUDA backend that answers.
#pragma once

namespace ooc::api {

// Device or managed memory: what cuDNN and cuBLAS can read themselves. False for host memory of
// any kind and whenever CUDA cannot tell (no GPU or driver, a null pointer). Never throws.
bool is_device_memory(const void* ptr) noexcept;

// Page-locked (or registered) host memory: what cudaHostAlloc returns and cudaFreeHost frees.
// False for device and pageable memory and whenever CUDA cannot tell. Never throws.
bool is_pinned_host_memory(const void* ptr) noexcept;

}  // namespace ooc::api
