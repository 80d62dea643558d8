// oocCancel / oocCublasCancel: the out-of-core calls running on each handle, and their cancel flags.
// A handle's entry lives while a call runs on it (cuDNN handles serve one thread at a time, so
// that is one call, but nothing here relies on it) and goes with the last of them.
#include <map>
#include <mutex>

#include "capi/capi_internal.hpp"
#include "ooc/ooc_cublas.h"

namespace ooc::capi {
namespace {

struct Running {
  std::atomic<bool> cancel{false};
  int calls = 0;
};

std::mutex g_mutex;
// Never destroyed: a call may still run on a thread of its own while the process exits.
std::map<const void*, Running>& running() {
  static auto& calls = *new std::map<const void*, Running>;
  return calls;
}

}  // namespace

CancellableCall::CancellableCall(const void* handle) : handle_(handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Running& r = running()[handle];  // map nodes stay put: the flag's address holds until erased
  ++r.calls;
  observer_.cancel = &r.cancel;
}

CancellableCall::~CancellableCall() {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = running().find(handle_);
  if (--it->second.calls == 0) running().erase(it);
}

bool cancel_calls_on(const void* handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = running().find(handle);
  if (it == running().end()) return false;
  it->second.cancel.store(true, std::memory_order_relaxed);
  return true;
}

}  // namespace ooc::capi

extern "C" cudnnStatus_t oocCancel(cudnnHandle_t handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  ooc::capi::cancel_calls_on(handle);
  return CUDNN_STATUS_SUCCESS;
}

extern "C" cublasStatus_t oocCublasCancel(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  ooc::capi::cancel_calls_on(handle);
  return CUBLAS_STATUS_SUCCESS;
}
