// The C API's one exception-to-status translation, the thread's last error and last call, and the
// getters of ooc_cudnn.h that read them.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>

#include "api/cuda_status.hpp"
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

// The process's totals (oocGetTotals): every thread's successful calls.
struct Totals {
  std::atomic<long long> calls{0}, out_of_core_calls{0}, chunks{0};
  std::atomic<size_t> bytes_h2d{0}, bytes_d2h{0};
  std::atomic<long long> nanoseconds{0}, pace_wait_nanoseconds{0};
};
Totals g_totals;

void add_to_totals(bool out_of_core, const RunStats& stats) {
  g_totals.calls += 1;
  if (!out_of_core) return;
  g_totals.out_of_core_calls += 1;
  g_totals.chunks += stats.chunks;
  g_totals.bytes_h2d += stats.bytes_h2d;
  g_totals.bytes_d2h += stats.bytes_d2h;
  g_totals.nanoseconds += static_cast<long long>(stats.seconds * 1e9);
  g_totals.pace_wait_nanoseconds += static_cast<long long>(stats.pace_wait_seconds * 1e9);
}
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

namespace {

// What the exception being handled is, in the terms both status mappings below need.
enum class Failure { out_of_budget, not_supported, invalid_argument, cudnn, cuda, bad_alloc, cancelled, other };

struct CaughtFailure {
  Failure kind;
  int status = 0;  // a cudnn_error's or cuda_error's own
};

CaughtFailure noted(const char* call, const std::exception& e, Failure kind, int status = 0) noexcept {
  set_last_error(with_call(call, e.what()));
  return {kind, status};
}

// Rethrows the exception being handled (call only inside a catch block), keeps "call: what()" as
// the thread's last error and says which kind it was; the most derived kinds are tried first.
CaughtFailure catch_current(const char* call) noexcept {
  try {
    throw;
  } catch (const out_of_budget& e) {
    return noted(call, e, Failure::out_of_budget);
  } catch (const not_supported& e) {
    return noted(call, e, Failure::not_supported);
  } catch (const std::invalid_argument& e) {  // ooc::invalid_argument included
    return noted(call, e, Failure::invalid_argument);
  } catch (const cudnn_error& e) {
    return noted(call, e, Failure::cudnn, e.status());
  } catch (const cuda_error& e) {
    return noted(call, e, Failure::cuda, e.status());
  } catch (const std::bad_alloc& e) {
    return noted(call, e, Failure::bad_alloc);
  } catch (const cancelled& e) {
    return noted(call, e, Failure::cancelled);
  } catch (const std::exception& e) {
    return noted(call, e, Failure::other);
  } catch (...) {
    set_last_error(with_call(call, "unknown exception"));
    return {Failure::other};
  }
}

}  // namespace

cudnnStatus_t cudnn_status_of_current_exception(const char* call) noexcept {
  const CaughtFailure f = catch_current(call);
  switch (f.kind) {
    case Failure::out_of_budget:
    case Failure::bad_alloc: return CUDNN_STATUS_ALLOC_FAILED;
    case Failure::not_supported: return CUDNN_STATUS_NOT_SUPPORTED;
    case Failure::invalid_argument: return CUDNN_STATUS_BAD_PARAM;
    case Failure::cancelled: return OOC_STATUS_CANCELLED;
    case Failure::cudnn: return static_cast<cudnnStatus_t>(f.status);
    case Failure::cuda:
      return f.status == cudaErrorMemoryAllocation ? CUDNN_STATUS_ALLOC_FAILED : CUDNN_STATUS_EXECUTION_FAILED;
    case Failure::other: break;
  }
  return CUDNN_STATUS_INTERNAL_ERROR;
}

cudaError_t cuda_status_of_current_exception(const char* call) noexcept {
  const CaughtFailure f = catch_current(call);
  switch (f.kind) {
    case Failure::cuda: return static_cast<cudaError_t>(f.status);
    case Failure::invalid_argument: return cudaErrorInvalidValue;
    case Failure::out_of_budget:  // a bad_alloc too
    case Failure::bad_alloc: return cudaErrorMemoryAllocation;
    default: return cudaErrorUnknown;  // cuDNN's failures and not_supported have no cuda* status
  }
}

std::string cudnn_failure_text(cudnnStatus_t status) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));  // cuDNN 9 says why here; the status alone rarely does
  return cudnnGetErrorString(status) + (detail[0] ? std::string(" (") + detail + ")" : "");
}

std::string cuda_failure_text(cudaError_t status) {
  (void)cudaGetLastError();  // not the next library's error
  return std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
}

void record_direct_call(std::string text) {
  LastCall& last = t_last_call;
  last.valid = true;
  last.out_of_core = false;
  last.direct_text = std::move(text);
  last.plan = Plan{};
  last.stats = RunStats{};
  add_to_totals(false, last.stats);
}

void record_streamed_call(std::string text, const RunStats& stats, size_t peak_device_bytes) {
  LastCall& last = t_last_call;
  last.valid = true;
  last.out_of_core = true;
  last.direct_text = std::move(text);
  last.plan = Plan{};
  last.plan.peak_device_bytes = peak_device_bytes;
  last.stats = stats;
  add_to_totals(true, stats);
}

void record_plan_run(Plan&& plan, const RunStats& stats) {
  LastCall& last = t_last_call;
  last.valid = true;
  last.out_of_core = true;
  last.direct_text.clear();
  last.plan = std::move(plan);
  last.stats = stats;
  add_to_totals(true, stats);
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
    info->chunks = static_cast<long long>(last.direct_text.empty() ? last.plan.num_chunks() : last.stats.chunks);
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
    return copy_text(last.out_of_core && last.direct_text.empty() ? last.plan.describe() : last.direct_text, buf, len);
  } catch (...) {  // describe() out of memory
    return copy_text("", buf, len);
  }
}

extern "C" size_t oocGetLastErrorString(char* buf, size_t len) { return copy_text(t_last_error, buf, len); }

extern "C" void oocResetTotals(void) {
  g_totals.calls = 0;
  g_totals.out_of_core_calls = 0;
  g_totals.chunks = 0;
  g_totals.bytes_h2d = 0;
  g_totals.bytes_d2h = 0;
  g_totals.nanoseconds = 0;
  g_totals.pace_wait_nanoseconds = 0;
}

extern "C" cudnnStatus_t oocGetTotals(oocTotals_t* totals) {
  if (!totals) return CUDNN_STATUS_BAD_PARAM;
  totals->calls = g_totals.calls;
  totals->outOfCoreCalls = g_totals.out_of_core_calls;
  totals->chunks = g_totals.chunks;
  totals->bytesH2D = g_totals.bytes_h2d;
  totals->bytesD2H = g_totals.bytes_d2h;
  totals->seconds = static_cast<double>(g_totals.nanoseconds.load()) * 1e-9;
  totals->paceWaitSeconds = static_cast<double>(g_totals.pace_wait_nanoseconds.load()) * 1e-9;
  return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t oocMeasureLinkBandwidth(double* h2d, double* d2h, double* bidirectional) {
  return guarded("oocMeasureLinkBandwidth", [&]() -> cudnnStatus_t {
    int device = 0;
    OOC_API_CUDA_CHECK(cudaGetDevice(&device));
    const ooc::LinkBandwidth link = ooc::measure_link_bandwidth(device, size_t{64} << 20);
    if (h2d) *h2d = link.h2d;
    if (d2h) *d2h = link.d2h;
    if (bidirectional) *bidirectional = link.bidir;
    return CUDNN_STATUS_SUCCESS;
  });
}
