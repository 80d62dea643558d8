// Page-locked host memory: the one place that calls cudaHostAlloc / cudaFreeHost.
#pragma once

#include <cstddef>

namespace ooc {

// Portable (page-locked for every device's context); at least one byte, so a zero-byte request
// still yields a unique pointer. Throws cuda_error (also when no GPU or driver is present).
void* pinned_host_alloc(size_t bytes);
void pinned_host_free(void* ptr) noexcept;  // null is fine

// Page-locks existing host memory in place (cudaHostRegister, portable), and undoes it. Throws
// cuda_error (also without a GPU); unregistering memory that is not registered throws too.
void pinned_host_register(void* ptr, size_t bytes);
void pinned_host_unregister(void* ptr);

}  // namespace ooc
