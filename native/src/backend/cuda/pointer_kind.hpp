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

}  // namespace ooc
