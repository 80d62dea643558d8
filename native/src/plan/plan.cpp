#include "ooc/plan.hpp"

#include <cstdio>
#include <sstream>

#include "plan/operation_vocabulary.hpp"
#include "plan/shape_format.hpp"

namespace ooc {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}


const char* math_mode_name(MathMode mode) { return mode == MathMode::tf32 ? "tf32" : "fp32"; }

std::string Plan::describe() const {
  const int sd = problem.spatial_dims;
  const SlotNames names = slot_names(problem.op);
  std::vector<int64_t> tile_out(tiling.out.begin(), tiling.out.begin() + sd);
  std::vector<int64_t> split_out(splits_out.begin(), splits_out.begin() + sd);
  const bool reduces_over_c = problem.op == Operation::forward || problem.op == Operation::matmul;
  const bool per_chunk = problem.op >= Operation::batchnorm_forward_training;  // batch norm: independent chunks
  const bool accumulates = !per_chunk && (reduces_over_c                              ? splits_c > 1
                                          : problem.op == Operation::backward_data   ? splits_k > 1
                                          : num_chunks() > static_cast<size_t>(splits_g * splits_k * splits_c));
  std::ostringstream s;
  s << "Plan for " << (fused.empty() ? std::string() : fused + ": ") << problem.describe() << "\n"
    << "  backend " << backend << (math == MathMode::tf32 ? ", math tf32" : "") << ", memory_limit "
    << format_bytes(static_cast<double>(memory_limit)) << "\n"
    << "  splits: " << (problem.groups > 1 ? "groups=" + std::to_string(splits_g) + " " : std::string())
    << "n=" << splits_n << " k=" << splits_k << " c=" << splits_c << " out=" << format_shape(split_out) << "  (tiles: "
    << (problem.groups > 1 ? "groups=" + std::to_string(tiling.g) + " " : std::string()) << "n=" << tiling.n
    << " k=" << tiling.k << " c=" << tiling.c << " out=" << format_shape(tile_out) << ")\n"
    << "  " << num_chunks() << " chunks" << (passes > 1 ? " x " + std::to_string(passes) + " passes" : std::string())
    << ", loop order " << loop_order_name(order) << ", " << buffers << " buffers"
    << (w_resident ? ", w resident" : "")
    << (accumulates ? std::string(", ") + names.output + " accumulates over " + reduction_name(problem.op) +
                          " on the device"
                    : std::string())
    << "\n"
    << "  device peak " << format_bytes(static_cast<double>(peak_device_bytes)) << " =";
  const char* sep = " ";
  for (const SlotPlan& slot : slots) {
    if (slot.bytes == 0) continue;  // a c-tile that carries nothing
    s << sep << slot.buffers << " x " << format_bytes(static_cast<double>(slot.bytes)) << " (" << slot.name
      << (slot.kind == SlotKind::kept ? ", kept" : "") << ")";
    sep = " + ";
  }
  s << sep << format_bytes(static_cast<double>(workspace_bytes)) << " (workspace)\n"
    << "  traffic: " << format_bytes(static_cast<double>(bytes_h2d)) << " H2D, "
    << format_bytes(static_cast<double>(bytes_d2h)) << " D2H; predicted " << predicted_seconds << " s";
  return s.str();
}

}  // namespace ooc
