#include "plan/cost_model.hpp"

#include <algorithm>

namespace ooc {

constexpr double kImperfectOverlap = 0.1;

double predict_seconds(const TrafficEstimate& t, const MachineModel& m) {
  const double copy_efficiency = t.copy_run_bytes / (t.copy_run_bytes + kHalfRateCopyRunBytes);
  const double h2d = t.bytes_h2d / m.h2d_bytes_per_s / copy_efficiency;
  const double d2h = t.bytes_d2h / m.d2h_bytes_per_s / copy_efficiency;
  const double both = (t.bytes_h2d + t.bytes_d2h) / m.bidir_bytes_per_s / copy_efficiency;
  const double host_copy = (t.bytes_h2d + t.bytes_d2h) / m.host_copy_bytes_per_s / copy_efficiency;
  const double gemm_efficiency = t.reduction_depth / (t.reduction_depth + kHalfRateReductionDepth) *
                                 t.output_channels /
                                 (t.output_channels + (t.grouped ? kHalfRateGroupedChannels : kHalfRateOutputChannels));
  const double compute = (t.flops / gemm_efficiency + t.num_chunks * m.chunk_half_flops) / m.flops_per_s +
                         t.num_chunks * m.chunk_overhead_s;
  double steady;
  if (t.buffers <= 1) {
    steady = h2d + d2h + host_copy + compute;  // nothing overlaps
  } else if (m.copies_share_compute) {
    steady = host_copy + compute;  // the same cores do both
  } else {
    // Overlap is never perfect: the stages that are not the bottleneck still cost a little. This
    // also makes the model prefer the plan with less compute or traffic when one stage dominates.
    const double slowest = std::max({h2d, d2h, both, host_copy, compute});
    steady = slowest + kImperfectOverlap * (std::max(h2d + d2h, both) + host_copy + compute - slowest);
    // Two slots overlap load with compute, but write-back of chunk i-1 then delays the load of i+1.
    if (t.buffers == 2) steady *= 1.15;
  }
  const double fill = t.first_load_bytes / m.h2d_bytes_per_s;
  const double drain = t.last_store_bytes / m.d2h_bytes_per_s + t.flops / m.flops_per_s / t.num_chunks;
  return steady + fill + drain;
}

double predict_layer_seconds(size_t bytes_h2d, size_t bytes_d2h, double flops, size_t chunks, const MachineModel& m) {
  return std::max({bytes_h2d / m.h2d_bytes_per_s, bytes_d2h / m.d2h_bytes_per_s,
                   (bytes_h2d + bytes_d2h) / m.bidir_bytes_per_s, flops / m.flops_per_s}) +
         static_cast<double>(chunks) * m.chunk_overhead_s;
}

}  // namespace ooc
