#include "ooc/plan.hpp"

#include <cstdio>
#include <sstream>

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

std::string Plan::describe() const {
  const int sd = problem.spatial_dims;
  std::vector<int64_t> tile_out(tiling.out.begin(), tiling.out.begin() + sd);
  std::vector<int64_t> split_out(splits_out.begin(), splits_out.begin() + sd);
  std::ostringstream s;
  s << "Plan for " << problem.describe() << "\n"
    << "  backend " << backend << ", memory_limit " << format_bytes(static_cast<double>(memory_limit)) << "\n"
    << "  splits: n=" << splits_n << " k=" << splits_k << " c=" << splits_c << " out=" << format_shape(split_out)
    << "  (tiles: n=" << tiling.n << " k=" << tiling.k << " c=" << tiling.c << " out=" << format_shape(tile_out)
    << ")\n"
    << "  " << num_chunks() << " chunks, loop order " << loop_order_name(order) << ", " << buffers << " buffers"
    << (w_resident ? ", w resident" : "") << (splits_c > 1 ? ", y accumulates over c on the device" : "") << "\n"
    << "  device peak " << format_bytes(static_cast<double>(peak_device_bytes)) << " = " << x_buffers << " x "
    << format_bytes(static_cast<double>(x_slot_bytes)) << " (x) + " << w_buffers << " x "
    << format_bytes(static_cast<double>(w_slot_bytes)) << " (w) + " << buffers << " x "
    << format_bytes(static_cast<double>(y_slot_bytes)) << " (y) + " << format_bytes(static_cast<double>(workspace_bytes))
    << " (workspace)\n"
    << "  traffic: " << format_bytes(static_cast<double>(bytes_h2d)) << " H2D, "
    << format_bytes(static_cast<double>(bytes_d2h)) << " D2H; predicted " << predicted_seconds << " s";
  return s.str();
}

}  // namespace ooc
