// ooc_cudaMemcpy, ooc_cudaMemset and their stream-ordered forms over any mix of device, pinned,
// pageable and ooc_cudaMalloc'd memory: a "device" buffer from ooc_cudaMalloc may be host memory,
// so the pointers, not the caller's cudaMemcpyKind, say which way a copy goes.
#include <cstring>
#include <memory>

#include "api/memory_kind.hpp"
#include "capi/capi_internal.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

bool valid_kind(cudaMemcpyKind kind) { return kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDefault; }

// A memset of host memory, run as a host function on the caller's stream (after its earlier
// work, before its later work); owned by the callback, which frees it.
struct HostMemset {
  void* data;
  int value;
  size_t count;
  static void CUDART_CB run(void* self) {
    const std::unique_ptr<HostMemset> set(static_cast<HostMemset*>(self));
    std::memset(set->data, set->value, set->count);
  }
};

}  // namespace
}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cudaError_t ooc_cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return guarded_cuda("ooc_cudaMemcpy", [&]() -> cudaError_t {
    if (!valid_kind(kind)) return cudaErrorInvalidMemcpyDirection;
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

extern "C" cudaError_t ooc_cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                           cudaStream_t stream) {
  return guarded_cuda("ooc_cudaMemcpyAsync", [&]() -> cudaError_t {
    if (!valid_kind(kind)) return cudaErrorInvalidMemcpyDirection;
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    if (host_backend_for_tests()) {  // host memory only, and no stream has work
      std::memmove(dst, src, count);
      return cudaSuccess;
    }
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDefault, stream);
  });
}

extern "C" cudaError_t ooc_cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return guarded_cuda("ooc_cudaMemsetAsync", [&]() -> cudaError_t {
    if (count == 0) return cudaSuccess;
    if (!devPtr) return cudaErrorInvalidValue;
    if (host_backend_for_tests()) {
      std::memset(devPtr, value, count);
      return cudaSuccess;
    }
    if (api::is_device_memory(devPtr)) return cudaMemsetAsync(devPtr, value, count, stream);
    auto set = std::make_unique<HostMemset>(HostMemset{devPtr, value, count});
    const cudaError_t status = cudaLaunchHostFunc(stream, &HostMemset::run, set.get());
    if (status == cudaSuccess) set.release();  // the callback owns it now
    return status;
  });
}
