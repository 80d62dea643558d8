#include "backend/fault_injection.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "ooc/errors.hpp"

namespace ooc {
namespace {

// inject_fault's name of each site, in FaultSite's order.
constexpr std::array<const char*, kFaultSiteCount> kSiteNames = {
    "copy", "conv", "gemm", "batchnorm", "activation", "softmax", "pool", "add", "device_copy"};

// Calls left until the fault fires (1: the next call); 0 when disarmed. One counter per site.
std::array<std::atomic<int64_t>, kFaultSiteCount> g_countdowns{};

std::atomic<int64_t>& countdown_of(FaultSite site) { return g_countdowns[static_cast<size_t>(site)]; }

// True on exactly one call: the one that takes the countdown from 1 to 0.
bool consume_countdown(std::atomic<int64_t>& countdown) {
  int64_t left = countdown.load();
  while (left > 0)
    if (countdown.compare_exchange_weak(left, left - 1)) return left == 1;
  return false;
}

// The exception the library behind each site raises when its work fails: the CUDA runtime for
// copies and our own kernels (batch norm), cuBLAS for GEMM (reported as cuda_error, as
// cublas_gemm.cpp does), cuDNN for convolutions and the layers it runs.
[[noreturn]] void throw_as_the_library_would(FaultSite site, const std::string& message) {
  switch (site) {
    case FaultSite::copy:
    case FaultSite::device_copy:
    case FaultSite::batchnorm:
      throw cuda_error(static_cast<int>(cudaErrorLaunchFailure), message);
    case FaultSite::gemm:
      throw cuda_error(static_cast<int>(CUBLAS_STATUS_EXECUTION_FAILED), message);
    case FaultSite::conv:
    case FaultSite::activation:
    case FaultSite::softmax:
    case FaultSite::pool:
    case FaultSite::add:
      break;
  }
  throw cudnn_error(static_cast<int>(CUDNN_STATUS_EXECUTION_FAILED), message);
}

std::string valid_site_names() {
  std::string names;
  for (const char* name : kSiteNames) names += std::string(names.empty() ? "" : ", ") + "\"" + name + "\"";
  return names;
}

}  // namespace

void throw_if_fault_injected(FaultSite site, const char* operation) {
  if (!consume_countdown(countdown_of(site))) return;
  throw_as_the_library_would(site,
                             std::string("injected fault: ") + operation + " (ooc::testing::inject_fault)");
}

void arm_fault(const std::string& where, int64_t countdown) {
  for (size_t i = 0; i < kSiteNames.size(); ++i)
    if (where == kSiteNames[i]) {
      g_countdowns[i].store(countdown > 0 ? countdown : 0);
      return;
    }
  throw invalid_argument("inject_fault: where must be one of " + valid_site_names() + ", got \"" + where + "\"");
}

}  // namespace ooc
