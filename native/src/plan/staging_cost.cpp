#include "plan/staging_cost.hpp"

#include <limits>

namespace ooc {

double x_bytes(const ConvProblem& p) { return static_cast<double>(p.x_elements()) * dtype_size(p.dtype); }
double w_bytes(const ConvProblem& p) { return static_cast<double>(p.w_elements()) * dtype_size(p.dtype); }
double y_bytes(const ConvProblem& p) { return static_cast<double>(p.y_elements()) * dtype_size(p.dtype); }
double bias_bytes(const ConvProblem& p) { return static_cast<double>(p.k) * dtype_size(p.dtype); }

PlannerConfig with_staged_share(PlannerConfig config, std::initializer_list<HostTensor> tensors,
                                const std::function<bool(const void*)>& direct) {
  double total = 0, staged = 0;
  for (const HostTensor& t : tensors) {
    if (!t.data) continue;
    total += t.bytes;
    if (!direct(t.data)) staged += t.bytes;
  }
  double& rate = config.machine.host_copy_bytes_per_s;
  rate = staged > 0 ? rate * (total / staged) : std::numeric_limits<double>::infinity();
  return config;
}

}  // namespace ooc
