// ooc.hpp's entry points: the convolutions (validate, then run_operation) and the queries of
// the machine and the libraries pyooc was built against.
#include "ooc/ooc.hpp"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <atomic>
#include <string>
#include <vector>

#include "api/memory_kind.hpp"
#include "api/float32_output.hpp"
#include "api/run_operation.hpp"
#include "exec/conv_pipeline.hpp"
#include "util/thread_pool.hpp"
#include "plan/planner.hpp"

namespace ooc {
namespace {

std::atomic<size_t> g_default_memory_limit{0};

}  // namespace

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

// The call of one convolution operation: its problem, planned by plan_for; run executes the plan.
OperationCall conv_call(const ConvProblem& problem, Operation op, std::vector<const void*> tensors,
                        std::function<RunStats(const Plan&, Backend&)> run) {
  if (problem.op != op)
    throw invalid_argument(std::string(operation_name(op)) + ": the problem describes " +
                           operation_name(problem.op) + " (make it with the matching ConvProblem factory)");
  // Each reduction group writes its own output tile: the chunks may spread over devices.
  return spreading({PlanKey("conv").add(problem), [&problem](const PlannerConfig& c) { return plan_for(problem, c); },
                    std::move(tensors), std::move(run)});
}

// A padding mode's halo is computed by the host gather (exec/region_copy.hpp), which reads x with
// host threads: x in device memory is refused, naming padding_mode.
void require_host_x_for_padding_mode(const ConvProblem& p, const void* x, const char* function) {
  if (p.padding_mode != PaddingMode::zeros && api::is_device_memory(x))
    throw invalid_argument(std::string(function) + ": padding_mode='" + padding_mode_name(p.padding_mode) +
                           "' needs x in host memory (its halo is gathered on the host), not device memory");
}

// A gradient reduced over every chunk (dw, db) may also split its one reduction over devices, each
// device's part summed into a buffer of its own: `run_into`, the same run into another output.
OperationCall reduced_call(OperationCall call, float* output, int64_t elements,
                           std::function<RunStats(const Plan&, Backend&, void*)> run_into) {
  call.run_into = std::move(run_into);
  call.output = output;
  call.output_elements = elements;
  return call;
}

}  // namespace

Plan plan_conv_forward(const ConvProblem& problem, const Options& options) {
  return plan_operation(conv_call(problem, Operation::forward, {}, {}), options);
}
Plan plan_conv_backward_data(const ConvProblem& problem, const Options& options) {
  return plan_operation(conv_call(problem, Operation::backward_data, {}, {}), options);
}
Plan plan_conv_backward_filter(const ConvProblem& problem, const Options& options) {
  return plan_operation(conv_call(problem, Operation::backward_filter, {}, {}), options);
}
Plan plan_conv_backward_bias(const ConvProblem& problem, const Options& options) {
  return plan_operation(conv_call(problem, Operation::backward_bias, {}, {}), options);
}

void conv_forward(const ConvProblem& problem, const void* x, const void* w, const void* bias, void* y,
                  const Options& options, Plan* used, RunStats* stats) {
  require_data({x, w, y, problem.has_bias ? bias : x}, "conv_forward");
  require_host_x_for_padding_mode(problem, x, "conv_forward");
  run_operation(conv_call(problem, Operation::forward, {x, w, bias, y},
                          [&](const Plan& plan, Backend& backend) {
                            return run_conv_forward(plan, backend, x, w, bias, y, ThreadPool::shared());
                          }),
                options, used, stats);
}

void conv_backward_data(const ConvProblem& problem, const void* dy, const void* w, void* dx, const Options& options,
                        Plan* used, RunStats* stats) {
  require_data({dy, w, dx}, "conv_backward_data");
  run_operation(conv_call(problem, Operation::backward_data, {dy, w, dx},
                          [&](const Plan& plan, Backend& backend) {
                            return run_conv_backward_data(plan, backend, dy, w, dx, ThreadPool::shared());
                          }),
                options, used, stats);
}

void conv_backward_filter(const ConvProblem& problem, const void* x, const void* dy, void* dw, const Options& options,
                          Plan* used, RunStats* stats) {
  require_data({x, dy, dw}, "conv_backward_filter");
  require_host_x_for_padding_mode(problem, x, "conv_backward_filter");
  with_float32_output(problem, dw, problem.w_elements(), [&](float* out) {
    auto run_into = [&](const Plan& plan, Backend& backend, void* into) {
      return run_conv_backward_filter(plan, backend, x, dy, into, ThreadPool::shared());
    };
    run_operation(reduced_call(conv_call(problem, Operation::backward_filter, {x, dy, out},
                                         [&](const Plan& plan, Backend& backend) { return run_into(plan, backend, out); }),
                               out, problem.w_elements(), run_into),
                  options, used, stats);
  });
}

void conv_backward_bias(const ConvProblem& problem, const void* dy, void* db, const Options& options, Plan* used,
                        RunStats* stats) {
  require_data({dy, db}, "conv_backward_bias");
  with_float32_output(problem, db, problem.k, [&](float* out) {
    auto run_into = [&](const Plan& plan, Backend& backend, void* into) {
      return run_conv_backward_bias(plan, backend, dy, into, ThreadPool::shared());
    };
    run_operation(reduced_call(conv_call(problem, Operation::backward_bias, {dy, out},
                                         [&](const Plan& plan, Backend& backend) { return run_into(plan, backend, out); }),
                               out, problem.k, run_into),
                  options, used, stats);
  });
}

}  // namespace ooc
