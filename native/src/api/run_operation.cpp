#include "api/run_operation.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "exec/observed_call.hpp"
#include "backend/cuda/cuda_machine_model.hpp"
#include "plan/device_shares.hpp"
#include "plan/staging_cost.hpp"
#include "util/numa_placement.hpp"
#include "util/thread_pool.hpp"

namespace ooc {
namespace {

// Backends are made once per process (a cuDNN handle and pinned staging are expensive) and used
// by one call at a time.
struct BackendSlot {
  std::mutex mutex;
  std::unique_ptr<Backend> backend;
  // The device's own host workers, pinned to its NUMA node's CPUs; null where the machine does
  // not tell (the process's pools serve it).
  std::unique_ptr<DevicePools> pools;
};

// Virtual host devices a call may list (Options::devices with the host backend).
constexpr int kMaxHostDevices = 64;

// The backend of options.device; `instance` > 0: another pipeline on the same device (a device
// listed twice in Options::devices).
BackendSlot& backend_slot(const Options& options, int instance = 0) {
  static std::mutex registry_mutex;
  // Never destroyed: at process exit the CUDA runtime may already be gone (as torch does with its
  // cuDNN handles, we let the OS reclaim them). Keyed by (cuda?, device, instance).
  static auto& slots = *new std::map<std::tuple<bool, int, int>, BackendSlot>;
  BackendKind kind = options.backend;
  if (kind == BackendKind::automatic) kind = device_count() > 0 ? BackendKind::cuda : BackendKind::host;
  if (kind == BackendKind::cuda) {
    const int n = device_count();
    if (n == 0) throw invalid_argument("backend 'cuda' was asked for, but no CUDA device is available");
    if (options.device < 0 || options.device >= n)
      throw invalid_argument("device " + std::to_string(options.device) + " is out of range: " + std::to_string(n) +
                             " CUDA device(s) present");
  }
  const bool cuda = kind == BackendKind::cuda;
  if (!cuda && (options.device < 0 || options.device >= kMaxHostDevices))
    throw invalid_argument("device " + std::to_string(options.device) + " is out of range for the host backend: its " +
                           "virtual devices are 0 to " + std::to_string(kMaxHostDevices - 1));
  std::lock_guard<std::mutex> lock(registry_mutex);
  BackendSlot& slot = slots[{cuda, options.device, instance}];
  if (!slot.backend) {
    slot.backend = cuda ? make_cuda_backend(options.device) : make_host_backend();
    // Its node's CPUs this process may use: pools sized for what can run them.
    const std::vector<int> cpus = usable_cpus(slot.backend->near_cpus());
    if (!cpus.empty()) slot.pools = std::make_unique<DevicePools>(cpus);
  }
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
  cfg.math = options.math;
  return cfg;
}

std::shared_ptr<const Plan> cached(const OperationCall& call, const PlannerConfig& config) {
  PlanKey key = call.key;
  return cached_plan(key.add(config), [&] { return call.plan(config); });
}

std::atomic<PlanObserver> g_plan_observer{nullptr};

// Shows the plan about to run to the plan observer (pyooc's logger), saying whether the automatic
// backend fell back to the host.
void announce(const Plan& plan, const Options& options, const Backend& backend) {
  if (const PlanObserver observe = g_plan_observer.load())
    observe(plan, options.backend == BackendKind::automatic && backend.name() == "host");
}

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
  cfg.math = options.math;
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

namespace {

// A worker device's share stops when the user's cancel flag is set (context) or another share
// failed (the observer's cancel flag): never the user's on_chunk, which runs on the calling thread.
bool user_did_not_cancel(void* context, const ChunkProgress*) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(context);
  return !(cancel && cancel->load(std::memory_order_relaxed));
}

// What several shares measured, as one run: bytes and chunks add up, the rest is the slowest's.
RunStats combined(const std::vector<RunStats>& runs) {
  RunStats total = runs.front();
  for (size_t i = 1; i < runs.size(); ++i) accumulate(total, runs[i], RunsWere::parallel);
  return total;
}

// Runs run_share(i) for every share, the first on this thread, each other on a thread of its own
// pinned near its device (and using that device's pools, as this thread does while running the
// first), stopped when the user cancels or another share fails. Returns when every share has
// finished or drained, then rethrows the first error in share order, if any.
class ShareThreads {
 public:
  ShareThreads(const std::vector<BackendSlot*>& slots, const Options& options) : slots_(slots), options_(options) {}

  void run(size_t shares, const std::function<int64_t(size_t)>& chunks_of, const std::function<void(size_t)>& run_share) {
    std::vector<std::exception_ptr> errors(shares);
    auto guarded = [&](size_t i) {
      try {
        UseDevicePools pools(slots_[i]->pools.get());
        run_share(i);
      } catch (...) {
        errors[i] = std::current_exception();
        failed_ = true;
      }
    };
    const std::atomic<bool>* user_cancel = options_.observer ? options_.observer->cancel : nullptr;
    std::vector<std::thread> workers;
    for (size_t i = 1; i < shares; ++i)
      workers.emplace_back([&, i] {
        if (slots_[i]->pools) pin_this_thread(usable_cpus(slots_[i]->backend->near_cpus()));
        CallObserver watch;
        watch.cancel = &failed_;
        watch.on_chunk = user_did_not_cancel;
        watch.context = const_cast<std::atomic<bool>*>(user_cancel);
        try {
          ObservedCall worker(&watch, chunks_of(i), 0.0);
          guarded(i);
        } catch (...) {
          errors[i] = std::current_exception();
          failed_ = true;
        }
      });
    guarded(0);
    for (std::thread& t : workers) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  const std::vector<BackendSlot*>& slots_;
  const Options& options_;
  std::atomic<bool> failed_{false};
};

// Options::devices: the plan (made for the first device's backend) cut into shares weighted by
// each device's modelled speed (plan/device_shares.hpp), each run by its own device's pipeline on
// its own thread, the first on this one; partial sums added to the output once every share has
// run; an operation with a host step between two passes (OperationCall::passes) has every share
// finish its first pass before the step, and the step run once. Every share finishes or drains
// before this returns or throws, so no buffer is freed while a copy uses it.
void run_spread(const OperationCall& call, const Options& options, Plan* used, RunStats* stats) {
  std::vector<BackendSlot*> slots;
  std::map<int, int> listed;
  for (int d : options.devices) {
    Options one = options;
    one.device = d;
    one.devices.clear();
    slots.push_back(&backend_slot(one, listed[d]++));
  }
  // Locked in one global order, so that concurrent spread calls cannot deadlock.
  std::vector<BackendSlot*> order = slots;
  std::sort(order.begin(), order.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  for (BackendSlot* s : order) locks.emplace_back(s->mutex);

  Backend& first = *slots.front()->backend;
  const PlannerConfig config = with_host_staging(planner_config(first, options), call.tensors,
                                                 [&](const void* t) { return first.host_is_device_accessible(t); });
  const std::shared_ptr<const Plan> plan = cached(call, config);
  std::vector<MachineModel> machines;
  for (BackendSlot* s : slots) machines.push_back(s->backend->machine());
  const bool partial_sums = call.run_into && !call.passes;
  const std::vector<DeviceShare> shares = device_shares(*plan, device_speeds(*plan, machines), partial_sums);
  ObservedCall observed(options.observer, static_cast<int64_t>(plan->num_chunks()) * plan->passes,
                        plan->predicted_seconds);
  announce(*plan, options, first);

  ShareThreads threads(slots, options);
  std::vector<RunStats> runs(shares.size());
  const auto chunks_of = [&](size_t i) { return static_cast<int64_t>(shares[i].plan.num_chunks()); };
  const auto backend_of = [&](size_t i) -> Backend& { return *slots[i]->backend; };
  if (call.passes) {
    const OperationCall::Passes passes = call.passes(*plan);
    std::vector<char> ran(shares.size(), 0);  // char, not bool: written by several threads
    auto run_pass = [&](const std::function<RunStats(const Plan&, Backend&)>& pass) {
      threads.run(shares.size(), chunks_of, [&](size_t i) {
        const RunStats s = pass(shares[i].plan, backend_of(i));
        if (ran[i]) accumulate(runs[i], s, RunsWere::sequential);
        else runs[i] = s;
        ran[i] = 1;
      });
    };
    if (passes.first) run_pass(passes.first);
    if (passes.between) passes.between();
    if (passes.second) run_pass(passes.second);
  } else {
    std::vector<std::vector<float>> sums(shares.size());
    threads.run(shares.size(), chunks_of, [&](size_t i) {
      if (shares[i].partial) {
        sums[i].assign(static_cast<size_t>(call.output_elements), 0.0f);
        runs[i] = call.run_into(shares[i].plan, backend_of(i), sums[i].data());
      } else {
        runs[i] = call.run(shares[i].plan, backend_of(i));
      }
    });
    for (const std::vector<float>& sum : sums)
      for (size_t j = 0; j < sum.size(); ++j) call.output[j] += sum[j];
  }
  observed.finish();
  if (stats) *stats = combined(runs);
  if (used) *used = *plan;
}

}  // namespace

void run_operation(const OperationCall& call, const Options& options, Plan* used, RunStats* stats) {
  if (options.devices.size() > 1 && call.spreads) return run_spread(call, options, used, stats);
  Options one = options;
  if (!options.devices.empty()) one.device = options.devices.front();  // an operation that does not spread
  BackendSlot& slot = backend_slot(one);
  std::lock_guard<std::mutex> lock(slot.mutex);
  UseDevicePools pools(slot.pools.get());  // host work near the device, where the machine tells
  Backend& backend = *slot.backend;
  const PlannerConfig config = with_host_staging(planner_config(backend, options), call.tensors,
                                                 [&](const void* t) { return backend.host_is_device_accessible(t); });
  const std::shared_ptr<const Plan> plan = cached(call, config);
  // Cancellation and progress for every pass of the run (run_chunks reports to it).
  ObservedCall observed(options.observer, static_cast<int64_t>(plan->num_chunks()) * plan->passes,
                        plan->predicted_seconds);
  announce(*plan, options, backend);
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
