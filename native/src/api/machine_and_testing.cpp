// ooc.hpp's entry points that reach the machine directly rather than run an operation: pinned host
// memory, the measured link, and the test-only hooks of ooc::testing.
#include "backend/backend.hpp"
#include "backend/cuda/foreign_stream.hpp"
#include "backend/cuda/link_bandwidth.hpp"
#include "backend/cuda/pinned_memory.hpp"
#include "backend/fault_injection.hpp"
#include "ooc/ooc.hpp"

namespace ooc {

void* alloc_pinned(size_t bytes) { return pinned_host_alloc(bytes); }
void free_pinned(void* ptr) noexcept { pinned_host_free(ptr); }
void register_pinned(void* ptr, size_t bytes) { pinned_host_register(ptr, bytes); }
void unregister_pinned(void* ptr) { pinned_host_unregister(ptr); }

void wait_for_stream(uintptr_t stream, int device) { wait_for_foreign_stream(stream, device); }

LinkBandwidth measure_link_bandwidth(int device, size_t bytes) { return measure_pinned_link_bandwidth(device, bytes); }

namespace testing {

void inject_fault(const std::string& where, int64_t countdown) { arm_fault(where, countdown); }
void set_host_direct_access(bool enabled) { set_host_backend_direct_access(enabled); }
void set_host_fault_injection(bool enabled) { set_host_backend_fault_injection(enabled); }

}  // namespace testing
}  // namespace ooc
