#include "api/run_operation.hpp"

#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "exec/observed_call.hpp"
#include "backend/cuda/cuda_machine_model.hpp"
#include "plan/staging_cost.hpp"

namespace ooc {
namespace {

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

std::shared_ptr<const Plan> cached(const OperationCall& call, const PlannerConfig& config) {
  PlanKey key = call.key;
  return cached_plan(key.add(config), [&] { return call.plan(config); });
}

std::atomic<PlanObserver> g_plan_observer{nullptr};

// plan_* for a GPU described by the caller's machine model, which need not be present: the cuda
// backend's workspace rules without the backend; the budget the caller's or the process default
// (a present GPU's free memory is no guide to an absent one's), else 1 GiB.
PlannerConfig given_gpu_config(const Options& options) {
  PlannerConfig cfg;
  cfg.memory_limit = options.memory_limit ? options.memory_limit : default_memory_limit();
  if (cfg.memory_limit == 0) cfg.memory_limit = size_t{1} << 30;
  cfg.workspace_bytes = cuda_workspace::allowance(cfg.memory_limit);
  cfg.workspace_max = cuda_workspace::max(cfg.memory_limit);
  cfg.filter_workspace_per_x_byte = cuda_workspace::kFilterPerXByte;
  cfg.machine = *options.machine;
  cfg.backend = "cuda";
  return cfg;
}

}  // namespace

Plan plan_operation(const OperationCall& call, const Options& options) {
  if (options.machine && options.backend != BackendKind::host) {
    PlannerConfig config = given_gpu_config(options);
    if (options.assume_pinned) config.machine.host_copy_bytes_per_s = std::numeric_limits<double>::infinity();
    return *cached(call, config);
  }
  BackendSlot& slot = backend_slot(options);
  std::lock_guard<std::mutex> lock(slot.mutex);
  PlannerConfig config = planner_config(*slot.backend, options);
  if (options.machine) config.machine = *options.machine;  // the host backend with the caller's figures
  // A plan_* twin sees no pointers: it plans for pageable tensors, or pinned ones when asked.
  if (options.assume_pinned) config.machine.host_copy_bytes_per_s = std::numeric_limits<double>::infinity();
  return *cached(call, config);
}

void run_operation(const OperationCall& call, const Options& options, Plan* used, RunStats* stats) {
  BackendSlot& slot = backend_slot(options);
  std::lock_guard<std::mutex> lock(slot.mutex);
  Backend& backend = *slot.backend;
  const PlannerConfig config = with_host_staging(planner_config(backend, options), call.tensors,
                                                 [&](const void* t) { return backend.host_is_device_accessible(t); });
  const std::shared_ptr<const Plan> plan = cached(call, config);
  // Cancellation and progress for every pass of the run (run_chunks reports to it).
  ObservedCall observed(options.observer, static_cast<int64_t>(plan->num_chunks()) * plan->passes,
                        plan->predicted_seconds);
  if (const PlanObserver observe = g_plan_observer.load())
    observe(*plan, options.backend == BackendKind::automatic && backend.name() == "host");
  RunStats s = call.run(*plan, backend);
  observed.finish();
  if (stats) *stats = s;
  if (used) *used = *plan;
}

void set_plan_observer(PlanObserver observer) noexcept { g_plan_observer.store(observer); }

void require_data(std::initializer_list<const void*> pointers, const char* function) {
  for (const void* p : pointers)
    if (!p) throw invalid_argument(std::string(function) + ": null data pointer");
}

}  // namespace ooc
