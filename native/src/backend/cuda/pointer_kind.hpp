// Where a caller's pointer lives, for direct DMA: page-locked (or registered) host memory and
// device/managed memory can be copied from at link speed without a staging buffer.
#pragma once

namespace ooc {

// True for pinned/registered host, device and managed memory; false for ordinary pageable memory,
// and whenever CUDA cannot tell (no GPU or driver). Never throws.
bool is_device_accessible(const void* host_ptr) noexcept;

// True only for device and managed memory (what cuDNN itself can read); false for host memory of
// any kind and whenever CUDA cannot tell. Never throws.
bool is_device_memory(const void* ptr) noexcept;

// The ordinal of the GPU whose memory holds `ptr` (device memory; managed memory: the device it was
// allocated on), or -1 for host memory of any kind and whenever CUDA cannot tell. Never throws.
// ooc/ooc.hpp declares it too, for the Python API's device arrays; it is defined once, here.
int device_memory_ordinal(const void* ptr) noexcept;

}  // namespace ooc
