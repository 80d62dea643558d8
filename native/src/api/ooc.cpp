// The public C++ API: picks the backend, plans, runs.
#include "ooc/ooc.hpp"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <atomic>
#include <map>
#include <mutex>

#include "api/backend_access.hpp"
#include "backend/backend.hpp"
#include "exec/conv_pipeline.hpp"
#include "exec/thread_pool.hpp"
#include "plan/plan_cache.hpp"
#include "plan/staging_cost.hpp"
#include "plan/planner.hpp"

namespace ooc {
namespace {

std::atomic<size_t> g_default_memory_limit{0};

// Backends are made once per process (a cuDNN handle and pinned staging are expensive) and used
// by one call at a time.
struct BackendSlot {
  std::mutex mutex;
  std::unique_ptr<Backend> backend;
};

BackendSlot& backend_slot(const Options& options) {
  static std::mutex registry_mutex;
  // Never destroyed: at process exit the CUDA runtime may already be gone (as torch does with its
  // cuDNN handles, we let the OS reclaim them).
  static auto& slots = *new std::map<int, BackendSlot>;  // -1: host, d >= 0: cuda device d
  BackendKind kind = options.backend;
  if (kind == BackendKind::automatic) kind = device_count() > 0 ? BackendKind::cuda : BackendKind::host;
  if (kind == BackendKind::cuda) {
    const int n = device_count();
    if (n == 0) throw invalid_argument("backend 'cuda' was asked for, but no CUDA device is available");
    if (options.device < 0 || options.device >= n)
      throw invalid_argument("device " + std::to_string(options.device) + " is out of range: " + std::to_string(n) +
                             " CUDA device(s) present");
  }
  const int key = kind == BackendKind::cuda ? options.device : -1;
  std::lock_guard<std::mutex> lock(registry_mutex);
  BackendSlot& slot = slots[key];
  if (!slot.backend) slot.backend = key < 0 ? make_host_backend() : make_cuda_backend(key);
  return slot;
}

PlannerConfig planner_config(Backend& backend, const Options& options) {
  PlannerConfig cfg;
  cfg.memory_limit = options.memory_limit ? options.memory_limit : default_memory_limit();
  if (cfg.memory_limit == 0) cfg.memory_limit = backend.default_memory_limit();
  cfg.workspace_bytes = backend.workspace_allowance(cfg.memory_limit);
  cfg.workspace_max = backend.workspace_max(cfg.memory_limit);
  cfg.filter_workspace_per_x_byte = backend.filter_workspace_per_x_byte();
  cfg.machine = backend.machine();
  cfg.backend = backend.name();
  return cfg;
}

}  // namespace

void with_backend(const Options& options, const std::function<void(Backend&, const PlannerConfig&)>& fn) {
  BackendSlot& slot = backend_slot(options);
  std::lock_guard<std::mutex> lock(slot.mutex);
  fn(*slot.backend, planner_config(*slot.backend, options));
}

void set_default_memory_limit(size_t bytes) { g_default_memory_limit = bytes; }
size_t default_memory_limit() { return g_default_memory_limit; }

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for us
    return 0;
  }
  return n;
}

int cudnn_version_runtime() noexcept { return static_cast<int>(cudnnGetVersion()); }
int cudnn_version_build() noexcept { return CUDNN_VERSION; }

int cuda_runtime_version() noexcept {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

std::string cudnn_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) && info.dli_fname) return info.dli_fname;
  return "";
}

namespace {

void check_operation(const ConvProblem& problem, Operation op) {
  if (problem.op != op)
    throw invalid_argument(std::string(operation_name(op)) + ": the problem describes " +
                           operation_name(problem.op) + " (make it with the matching ConvProblem factory)");
}

Plan plan_operation(const ConvProblem& problem, Operation op, const Options& options) {
  check_operation(problem, op);
  BackendSlot& slot = backend_slot(options);
  std::lock_guard<std::mutex> lock(slot.mutex);
  PlannerConfig config = planner_config(*slot.backend, options);
  if (options.assume_pinned) config.machine.host_copy_bytes_per_s = std::numeric_limits<double>::infinity();
  return *cached_plan(PlanKey("conv").add(problem).add(config), [&] { return plan_for(problem, config); });
}

// Plans (or reuses the plan for) one operation on the process-wide backend and runs it: `run`
// executes the plan. When every tensor of the call is pinned (or device) memory it moves by DMA
// alone, so the plan is made without the host gather/scatter cost (staging_cost.hpp).
template <typename Run>
void run_operation(const ConvProblem& problem, Operation op, const Options& options, Plan* used, RunStats* stats,
                   std::initializer_list<const void*> tensors, Run run) {
  check_operation(problem, op);
  BackendSlot& slot = backend_slot(options);
  std::lock_guard<std::mutex> lock(slot.mutex);
  const PlannerConfig config = with_host_staging(planner_config(*slot.backend, options), tensors, [&](const void* t) {
    return slot.backend->host_is_device_accessible(t);
  });
  const std::shared_ptr<const Plan> plan =
      cached_plan(PlanKey("conv").add(problem).add(config), [&] { return plan_for(problem, config); });
  RunStats s = run(*plan, *slot.backend);
  if (stats) *stats = s;
  if (used) *used = *plan;
}

}  // namespace

Plan plan_conv_forward(const ConvProblem& problem, const Options& options) {
  return plan_operation(problem, Operation::forward, options);
}
Plan plan_conv_backward_data(const ConvProblem& problem, const Options& options) {
  return plan_operation(problem, Operation::backward_data, options);
}
Plan plan_conv_backward_filter(const ConvProblem& problem, const Options& options) {
  return plan_operation(problem, Operation::backward_filter, options);
}
Plan plan_conv_backward_bias(const ConvProblem& problem, const Options& options) {
  return plan_operation(problem, Operation::backward_bias, options);
}

void conv_forward(const ConvProblem& problem, const float* x, const float* w, const float* bias, float* y,
                  const Options& options, Plan* used, RunStats* stats) {
  if (!x || !w || !y || (problem.has_bias && !bias)) throw invalid_argument("conv_forward: null data pointer");
  run_operation(problem, Operation::forward, options, used, stats, {x, w, bias, y}, [&](const Plan& plan, Backend& backend) {
    return run_conv_forward(plan, backend, x, w, bias, y, ThreadPool::shared());
  });
}

void conv_backward_data(const ConvProblem& problem, const float* dy, const float* w, float* dx, const Options& options,
                        Plan* used, RunStats* stats) {
  if (!dy || !w || !dx) throw invalid_argument("conv_backward_data: null data pointer");
  run_operation(problem, Operation::backward_data, options, used, stats, {dy, w, dx}, [&](const Plan& plan, Backend& backend) {
    return run_conv_backward_data(plan, backend, dy, w, dx, ThreadPool::shared());
  });
}

void conv_backward_filter(const ConvProblem& problem, const float* x, const float* dy, float* dw,
                          const Options& options, Plan* used, RunStats* stats) {
  if (!x || !dy || !dw) throw invalid_argument("conv_backward_filter: null data pointer");
  run_operation(problem, Operation::backward_filter, options, used, stats, {x, dy, dw}, [&](const Plan& plan, Backend& backend) {
    return run_conv_backward_filter(plan, backend, x, dy, dw, ThreadPool::shared());
  });
}

void conv_backward_bias(const ConvProblem& problem, const float* dy, float* db, const Options& options, Plan* used,
                        RunStats* stats) {
  if (!dy || !db) throw invalid_argument("conv_backward_bias: null data pointer");
  run_operation(problem, Operation::backward_bias, options, used, stats, {dy, db}, [&](const Plan& plan, Backend& backend) {
    return run_conv_backward_bias(plan, backend, dy, db, ThreadPool::shared());
  });
}

}  // namespace ooc
