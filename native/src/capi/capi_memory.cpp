// ooc_cudaMalloc & co.: memory placed as ooc_cuDNN placed it, device first and page-locked host
// memory once the device is full, so a program written for cuDNN keeps its tensors "allocated"
// beyond the GPU's size and every ooc_cudnn* call takes them wherever they landed.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include <unistd.h>

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

// Physical host memory and what of it the kernel could hand out now (MemAvailable), for
// ooc_cudaMemGetInfo: page-locked allocations come from there once the device is full.
struct HostMemory {
  size_t total = 0, available = 0;
};
HostMemory host_memory() {
  HostMemory m;
  const long page = sysconf(_SC_PAGESIZE);
  m.total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(page);
  m.available = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<size_t>(page);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") m.available = kib * 1024;
  return m;
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

extern "C" cudaError_t ooc_cudaMallocHost(void** ptr, size_t size) {
  return guarded_cuda("ooc_cudaMallocHost", [&]() -> cudaError_t {
    if (!ptr) return cudaErrorInvalidValue;
    *ptr = nullptr;
    if (size == 0) return cudaSuccess;
    Allocations& a = allocations();
    std::lock_guard<std::mutex> lock(a.mutex);
    if (host_backend_for_tests()) {
      *ptr = std::malloc(size);
      if (!*ptr) return cudaErrorMemoryAllocation;
      a.sizes[*ptr] = {size, Placement::pageable};
      return cudaSuccess;
    }
    const cudaError_t status = cudaHostAlloc(ptr, size, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      *ptr = nullptr;
      return status;
    }
    a.sizes[*ptr] = {size, Placement::pinned};
    return cudaSuccess;
  });
}

// Our allocations are freed as they were placed, whichever of the two frees is called.
extern "C" cudaError_t ooc_cudaFreeHost(void* ptr) { return ooc_cudaFree(ptr); }

extern "C" cudaError_t ooc_cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return guarded_cuda("ooc_cudaMemGetInfo", [&]() -> cudaError_t {
    const HostMemory host = host_memory();
    size_t device_free = 0, device_total = 0;
    if (!host_backend_for_tests()) {
      const cudaError_t status = cudaMemGetInfo(&device_free, &device_total);
      if (status != cudaSuccess) return status;
      const size_t reserve = default_memory_limit() ? default_memory_limit() : device_total / 8;
      const size_t cap = g_device_allocation_limit;
      size_t placed = 0;
      {
        Allocations& a = allocations();
        std::lock_guard<std::mutex> lock(a.mutex);
        placed = a.device_bytes;
      }
      device_total = std::min(device_total > reserve ? device_total - reserve : 0, cap);
      device_free = std::min(device_free > reserve ? device_free - reserve : 0, cap > placed ? cap - placed : 0);
    }
    if (free_bytes) *free_bytes = device_free + host.available;
    if (total_bytes) *total_bytes = device_total + host.total;
    return cudaSuccess;
  });
}

extern "C" void oocSetDeviceAllocationLimit(size_t bytes) { g_device_allocation_limit = bytes; }
