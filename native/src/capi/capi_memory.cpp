// ooc_cudaMalloc & co.: memory placed as ooc_cuDNN placed it, device first and page-locked host
// memory once the device is full, so a program written for cuDNN keeps its tensors "allocated"
// beyond the GPU's size and every ooc_cudnn* call takes them wherever they landed.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "api/memory_kind.hpp"
#include "capi/capi_internal.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

std::atomic<size_t> g_device_allocation_limit{std::numeric_limits<size_t>::max()};

// Where an allocation lives; pageable only under the host-backend test switch, which never
// touches CUDA (testing::use_host_backend), so a whole C API program can run in CI.
enum class Placement { device, pinned, pageable };

// Which allocations are which, so ooc_cudaFree and ooc_cudaMemset need not ask CUDA.
struct Allocations {
  std::mutex mutex;
  std::unordered_map<void*, std::pair<size_t, Placement>> sizes;  // ptr -> (bytes, where)
  size_t device_bytes = 0;
};

Allocations& allocations() {
  static auto& a = *new Allocations;  // never destroyed: frees may come from static destructors
  return a;
}

// The device keeps room for the out-of-core arena (the memory limit; an eighth of the device when
// none is set, so that chunked calls still have room once allocations have filled the rest): only
// what is free beyond it goes to allocations.
bool device_has_room(size_t bytes, size_t device_bytes_so_far, cudaError_t* error) {
  const size_t cap = g_device_allocation_limit;
  if (device_bytes_so_far > cap || bytes > cap - device_bytes_so_far) return false;
  size_t free_bytes = 0, total_bytes = 0;
  *error = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (*error != cudaSuccess) return false;
  const size_t reserve = default_memory_limit() ? default_memory_limit() : total_bytes / 8;
  return free_bytes >= reserve && free_bytes - reserve >= bytes;
}

}  // namespace
}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cudaError_t ooc_cudaMalloc(void** devPtr, size_t size) {
  return guarded_cuda("ooc_cudaMalloc", [&]() -> cudaError_t {
    if (!devPtr) return cudaErrorInvalidValue;
    *devPtr = nullptr;
    if (size == 0) return cudaSuccess;  // as cudaMalloc: success and a null pointer
    Allocations& a = allocations();
    std::lock_guard<std::mutex> lock(a.mutex);
    if (host_backend_for_tests()) {
      *devPtr = std::malloc(size);
      if (!*devPtr) return cudaErrorMemoryAllocation;
      a.sizes[*devPtr] = {size, Placement::pageable};
      return cudaSuccess;
    }
    cudaError_t status = cudaSuccess;
    if (device_has_room(size, a.device_bytes, &status)) {
      status = cudaMalloc(devPtr, size);
      if (status == cudaSuccess) {
        a.sizes[*devPtr] = {size, Placement::device};
        a.device_bytes += size;
        return cudaSuccess;
      }
      if (status != cudaErrorMemoryAllocation) return status;
      (void)cudaGetLastError();  // full after all (fragmentation, another process): host memory then
    } else if (status != cudaSuccess) {
      return status;  // no device, no driver
    }
    status = cudaHostAlloc(devPtr, size, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      *devPtr = nullptr;
      return status;
    }
    a.sizes[*devPtr] = {size, Placement::pinned};
    return cudaSuccess;
  });
}

extern "C" cudaError_t ooc_cudaFree(void* devPtr) {
  return guarded_cuda("ooc_cudaFree", [&]() -> cudaError_t {
    if (!devPtr) return cudaSuccess;
    Allocations& a = allocations();
    {
      std::lock_guard<std::mutex> lock(a.mutex);
      const auto it = a.sizes.find(devPtr);
      if (it != a.sizes.end()) {
        const auto [bytes, placement] = it->second;
        a.sizes.erase(it);
        switch (placement) {
          case Placement::pageable: std::free(devPtr); return cudaSuccess;
          case Placement::pinned: return cudaFreeHost(devPtr);
          case Placement::device: a.device_bytes -= bytes; return cudaFree(devPtr);
        }
      }
    }
    // Not ours: free it as whatever CUDA says it is (cudaFree reports what it cannot free).
    return api::is_pinned_host_memory(devPtr) ? cudaFreeHost(devPtr) : cudaFree(devPtr);
  });
}

extern "C" cudaError_t ooc_cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return guarded_cuda("ooc_cudaMemcpy", [&]() -> cudaError_t {
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    if (host_backend_for_tests()) {  // every buffer is host memory there, and CUDA is not touched
      std::memmove(dst, src, count);
      return cudaSuccess;
    }
    // The pointers say the direction: a "device" buffer from ooc_cudaMalloc may be host memory.
    return cudaMemcpy(dst, src, count, cudaMemcpyDefault);
  });
}

extern "C" cudaError_t ooc_cudaMemset(void* devPtr, int value, size_t count) {
  return guarded_cuda("ooc_cudaMemset", [&]() -> cudaError_t {
    if (count == 0) return cudaSuccess;
    if (!devPtr) return cudaErrorInvalidValue;
    if (!host_backend_for_tests() && api::is_device_memory(devPtr)) return cudaMemset(devPtr, value, count);
    std::memset(devPtr, value, count);  // pinned or pageable host memory
    return cudaSuccess;
  });
}

extern "C" void oocSetDeviceAllocationLimit(size_t bytes) { g_device_allocation_limit = bytes; }
