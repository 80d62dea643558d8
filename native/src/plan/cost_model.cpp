#include "plan/cost_model.hpp"

#include <algorithm>

namespace ooc {

double predict_seconds(const TrafficEstimate& t, const MachineModel& m) {
  const double h2d = t.bytes_h2d / m.h2d_bytes_per_s;
  const double d2h = t.bytes_d2h / m.d2h_bytes_per_s;
  const double both = (t.bytes_h2d + t.bytes_d2h) / m.bidir_bytes_per_s;
  const double compute = t.flops / m.flops_per_s + t.num_chunks * m.chunk_overhead_s;
  double steady;
  if (t.buffers <= 1) {
    steady = h2d + d2h + compute;  // nothing overlaps
  } else {
    steady = std::max({h2d, d2h, both, compute});
    // Two slots overlap load with compute, but write-back of chunk i-1 then delays the load of i+1.
    if (t.buffers == 2) steady *= 1.15;
  }
  const double fill = t.first_load_bytes / m.h2d_bytes_per_s;
  const double drain = t.last_store_bytes / m.d2h_bytes_per_s + t.flops / m.flops_per_s / t.num_chunks;
  return steady + fill + drain;
}

}  // namespace ooc
