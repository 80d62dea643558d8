#include "backend/cuda/fault_injection.hpp"

#include <atomic>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "ooc/ooc.hpp"

namespace ooc {
namespace {

// Calls left until the fault fires (1: the next call); 0 when disarmed.
std::atomic<int64_t> g_copy_countdown{0};
std::atomic<int64_t> g_conv_countdown{0};

std::atomic<int64_t>& countdown_of(FaultSite site) {
  return site == FaultSite::copy ? g_copy_countdown : g_conv_countdown;
}

// True on exactly one call: the one that takes the countdown from 1 to 0.
bool consume_countdown(std::atomic<int64_t>& countdown) {
  int64_t left = countdown.load();
  while (left > 0)
    if (countdown.compare_exchange_weak(left, left - 1)) return left == 1;
  return false;
}

}  // namespace

void throw_if_fault_injected(FaultSite site, const char* operation) {
  if (!consume_countdown(countdown_of(site))) return;
  const std::string message = std::string("injected fault: ") + operation + " (ooc::testing::inject_fault)";
  if (site == FaultSite::copy) throw cuda_error(static_cast<int>(cudaErrorLaunchFailure), message);
  throw cudnn_error(static_cast<int>(CUDNN_STATUS_EXECUTION_FAILED), message);
}

namespace testing {

void inject_fault(const std::string& where, int64_t countdown) {
  FaultSite site;
  if (where == "copy")
    site = FaultSite::copy;
  else if (where == "conv")
    site = FaultSite::conv;
  else
    throw invalid_argument("inject_fault: where must be \"copy\" or \"conv\", got \"" + where + "\"");
  countdown_of(site).store(countdown > 0 ? countdown : 0);
}

}  // namespace testing
}  // namespace ooc
