// The C API's one exception-to-status translation, the thread's last error and last call, and the
// getters of ooc_cudnn.h that read them.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "capi/capi_internal.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

// Per thread, as cuDNN's own last error: threads with distinct handles never see each other's.
struct LastCall {
  bool valid = false;
  bool out_of_core = false;
  std::string direct_text;
  Plan plan;
  RunStats stats;
};
thread_local LastCall t_last_call;
thread_local std::string t_last_error;

std::string with_call(const char* call, const char* what) { return std::string(call) + ": " + what; }

}  // namespace

void clear_last_error() noexcept { t_last_error.clear(); }

void set_last_error(std::string message) noexcept {
  try {
    t_last_error = std::move(message);
  } catch (...) {  // out of memory for the message itself: keep none rather than throw
    t_last_error.clear();
  }
}

cudnnStatus_t cudnn_status_of_current_exception(const char* call) noexcept {
  try {
    throw;
  } catch (const out_of_budget& e) {
    set_last_error(with_call(call, e.what()));
    return CUDNN_STATUS_ALLOC_FAILED;
  } catch (const not_supported& e) {
    set_last_error(with_call(call, e.what()));
    return CUDNN_STATUS_NOT_SUPPORTED;
  } catch (const std::invalid_argument& e) {  // ooc::invalid_argument included
    set_last_error(with_call(call, e.what()));
    return CUDNN_STATUS_BAD_PARAM;
  } catch (const cudnn_error& e) {
    set_last_error(with_call(call, e.what()));
    return static_cast<cudnnStatus_t>(e.status());
  } catch (const cuda_error& e) {
    set_last_error(with_call(call, e.what()));
    return e.status() == cudaErrorMemoryAllocation ? CUDNN_STATUS_ALLOC_FAILED : CUDNN_STATUS_EXECUTION_FAILED;
  } catch (const std::bad_alloc& e) {
    set_last_error(with_call(call, e.what()));
    return CUDNN_STATUS_ALLOC_FAILED;
  } catch (const std::exception& e) {
    set_last_error(with_call(call, e.what()));
    return CUDNN_STATUS_INTERNAL_ERROR;
  } catch (...) {
    set_last_error(with_call(call, "unknown exception"));
    return CUDNN_STATUS_INTERNAL_ERROR;
  }
}

cudaError_t cuda_status_of_current_exception(const char* call) noexcept {
  try {
    throw;
  } catch (const cuda_error& e) {
    set_last_error(with_call(call, e.what()));
    return static_cast<cudaError_t>(e.status());
  } catch (const std::invalid_argument& e) {
    set_last_error(with_call(call, e.what()));
    return cudaErrorInvalidValue;
  } catch (const std::bad_alloc& e) {
    set_last_error(with_call(call, e.what()));
    return cudaErrorMemoryAllocation;
  } catch (const std::exception& e) {
    set_last_error(with_call(call, e.what()));
    return cudaErrorUnknown;
  } catch (...) {
    set_last_error(with_call(call, "unknown exception"));
    return cudaErrorUnknown;
  }
}

void record_direct_call(std::string text) {
  LastCall& last = t_last_call;
  last.valid = true;
  last.out_of_core = false;
  last.direct_text = std::move(text);
  last.plan = Plan{};
  last.stats = RunStats{};
}

void record_plan_run(Plan&& plan, const RunStats& stats) {
  LastCall& last = t_last_call;
  last.valid = true;
  last.out_of_core = true;
  last.direct_text.clear();
  last.plan = std::move(plan);
  last.stats = stats;
}

size_t copy_text(const std::string& text, char* buf, size_t len) noexcept {
  if (buf && len > 0) {
    const size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

}  // namespace ooc::capi

using namespace ooc::capi;

extern "C" cudnnStatus_t oocGetLastPlanInfo(oocPlanInfo_t* info) {
  if (!info) return CUDNN_STATUS_BAD_PARAM;
  *info = oocPlanInfo_t{};
  const LastCall& last = t_last_call;
  if (!last.valid) return CUDNN_STATUS_NOT_INITIALIZED;
  if (last.out_of_core) {
    info->outOfCore = 1;
    info->chunks = static_cast<long long>(last.plan.num_chunks());
    info->peakDeviceBytes = last.plan.peak_device_bytes;
    info->bytesH2D = last.stats.bytes_h2d;
    info->bytesD2H = last.stats.bytes_d2h;
    info->predictedSeconds = last.plan.predicted_seconds;
    info->seconds = last.stats.seconds;
  }
  return CUDNN_STATUS_SUCCESS;
}

extern "C" size_t oocGetLastPlanDescription(char* buf, size_t len) {
  try {
    const LastCall& last = t_last_call;
    if (!last.valid) return copy_text("", buf, len);
    return copy_text(last.out_of_core ? last.plan.describe() : last.direct_text, buf, len);
  } catch (...) {  // describe() out of memory
    return copy_text("", buf, len);
  }
}

extern "C" size_t oocGetLastErrorString(char* buf, size_t len) { return copy_text(t_last_error, buf, len); }
