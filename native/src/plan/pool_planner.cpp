// The planners of pooling and its backward (layer_planner.hpp): the first box tiling that fits,
// each box loading the rows its windows reach.
#include "plan/layer_planner.hpp"

#include <algorithm>
#include <utility>

#include "plan/box_search.hpp"
#include "plan/box_tiling.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/cost_model.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {
namespace {

using namespace planner_parts;  // NOLINT: the shared planner pieces

// One spatial dim of a windowed layer's chunk: the rows its x-shaped slots hold (loaded, or
// computed), the rows its y-shaped slots hold, and of those the rows written back (pooling) or
// loaded (its backward).
struct WindowRows {
  Range x, y, y_moved;
};

// A layer whose chunks reach past their box along the spatial dims (pooling and its backward):
// boxes of `extent`, per dim the rows rows(box range, d, whole dim) gives; `pairs` tensors share
// each slot size (1: x, y; 2: x and dx, y and dy); loads_y: the y-shaped rows are loaded too.
struct WindowedLayer {
  Extent5 extent;
  std::array<bool, 5> splittable;
  int pairs;
  bool loads_y;
  int64_t output_elements;
};

template <typename Rows>
Plan plan_windowed(const ConvProblem& p, const PlannerConfig& config, const WindowedLayer& layer, Rows rows) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const Extent5& extent = layer.extent;
  // Largest x and y extents of any tile along each dim.
  const auto slots = [&](const Extent5& t) {
    Extent5 xs{t[0], t[1], 1, 1, 1}, ys{t[0], t[1], 1, 1, 1};
    for (int d = 0; d < 3; ++d) {
      const bool whole = t[2 + d] == extent[2 + d];
      int64_t xm = 0, ym = 0;
      const auto visit = [&](int64_t i) {
        const int64_t b = i * t[2 + d];
        const WindowRows r = rows(Range{b, std::min(extent[2 + d], b + t[2 + d])}, d, whole);
        xm = std::max(xm, r.x.size());
        ym = std::max(ym, r.y.size());
      };
      const int64_t tiles = ceil_div(extent[2 + d], t[2 + d]);
      if (tiles_within_limit(tiles)) {
        for (int64_t i = 0; i < tiles; ++i) visit(i);
      } else {
        // No plan's tiling (too many chunks), asked only for the out-of-budget message: the tiles
        // differ only where the padding clips them, at either end, so those and one inside do.
        for (int64_t i = 0; i < 64; ++i) visit(i), visit(tiles - 1 - i);
        visit(tiles / 2);
      }
      xs[2 + d] = xm;
      ys[2 + d] = ym;
    }
    return std::make_pair(xs, ys);
  };
  const auto peak = [&](const Extent5& xs, const Extent5& ys, int buffers) {
    return static_cast<size_t>(buffers) * layer.pairs * (slot_bytes(product(xs), es) + slot_bytes(product(ys), es));
  };
  const auto footprint = [&](const Extent5& tile, int buffers) {
    const auto [xs, ys] = slots(tile);
    return Footprint{peak(xs, ys, buffers), product(xs), static_cast<double>(box_count(extent, tile))};
  };
  const auto expand = [&](const Extent5& tile, int buffers) {
    Plan plan = box_plan_header(p, config, extent, tile, buffers);
    const auto [xs, ys] = slots(tile);
    plan.x_buffers = plan.y_buffers = layer.pairs * buffers;
    plan.w_buffers = 0;
    plan.x_slot_bytes = slot_bytes(product(xs), es);
    plan.y_slot_bytes = slot_bytes(product(ys), es);
    plan.peak_device_bytes = peak(xs, ys, buffers);
    for_each_box(extent, tile, [&](Chunk& ch) {
      const size_t nc = static_cast<size_t>(ch.n.size() * ch.c.size());
      size_t x_elems = nc, y_elems = nc, moved_elems = nc;
      for (int d = 0; d < 3; ++d) {
        ch.target[d] = ch.out[d];  // for_each_box tiled the extent into `out`
        const WindowRows r = rows(ch.target[d], d, tile[2 + d] == extent[2 + d]);
        ch.in[d] = r.x;
        ch.out[d] = r.y;
        ch.out_read[d] = r.y_moved;
        ch.compute_padding[d] = p.padding[d];
        x_elems *= static_cast<size_t>(r.x.size());
        y_elems *= static_cast<size_t>(r.y.size());
        moved_elems *= static_cast<size_t>(r.y_moved.size());
      }
      const size_t loaded = layer.loads_y ? x_elems + y_elems + moved_elems : x_elems;
      plan.bytes_h2d += static_cast<size_t>(static_cast<double>(loaded) * es);
      plan.chunks.push_back(ch);
    });
    plan.bytes_d2h = static_cast<size_t>(static_cast<double>(layer.output_elements) * es);
    if (p.beta != 0.0) plan.bytes_h2d += plan.bytes_d2h;  // the output is loaded to be blended into
    plan.predicted_seconds = predict_layer_seconds(plan.bytes_h2d, plan.bytes_d2h, p.flops(), plan.chunks.size(),
                                                   config.machine);
    return plan;
  };
  return plan_first_fitting_box(p, config, extent, layer.splittable, nullptr, footprint, expand);
}

}  // namespace

PoolRows pool_rows(Range tile, int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  if (tile.size() == out) return {Range{0, in}, Range{0, out}};
  if (padding == 0) return {conv_input_range(tile, kernel, stride, 0, 1), tile};
  // m rows before the tile: enough that the loaded rows start at or before the tile's first
  // window, but never before the tensor (there cuDNN's padding is the real border's).
  const int64_t m = std::min(tile.begin, ceil_div(padding, stride));
  const int64_t x_begin = (tile.begin - m) * stride;
  const int64_t natural_end = conv_input_range(tile, kernel, stride, padding, 1).end;
  const int64_t x_end = tile.end == out ? in : std::min(in, natural_end);
  const int64_t count = (x_end - x_begin + 2 * padding - kernel) / stride + 1;
  return {Range{x_begin, x_end}, Range{tile.begin - m, tile.begin - m + count}};
}

Plan plan_pool(const ConvProblem& p, const PlannerConfig& config) {
  // Tiles of y; each loads the x rows its windows read and computes the y rows pool_rows aligns.
  const WindowedLayer layer{{p.n, p.c, p.out[0], p.out[1], p.out[2]}, {true, true, true, true, true}, 1, false,
                            p.y_elements()};
  return plan_windowed(p, config, layer, [&](Range tile, int d, bool) {
    const PoolRows r = pool_rows(tile, p.in[d], p.out[d], p.kernel[d], p.stride[d], p.padding[d]);
    return WindowRows{r.x, r.y, tile};  // only the tile's rows are written back
  });
}

Plan plan_pool_backward_for(const ConvProblem& p, const PlannerConfig& config) {
  // Tiles of dx; padded dims stay whole. The rows of one spatial dim a dx tile needs: whole dims
  // compute everything with cuDNN's own padding; split ones (padding 0) follow backward data
  // (conv_geometry.hpp): x and dx over the computed rows, y and dy over the dy rows, dy loaded
  // over the rows read.
  const WindowedLayer layer{{p.n, p.c, p.in[0], p.in[1], p.in[2]},
                            {true, true, p.padding[0] == 0, p.padding[1] == 0, p.padding[2] == 0},
                            2,
                            true,
                            p.x_elements()};
  return plan_windowed(p, config, layer, [&](Range target, int d, bool whole) {
    if (whole) return WindowRows{Range{0, p.in[d]}, Range{0, p.out[d]}, Range{0, p.out[d]}};
    const BackwardDataRows r = backward_data_rows(target, p.out[d], p.kernel[d], p.stride[d], 0, 1);
    return WindowRows{r.computed, r.dy_rows, r.read};
  });
}

}  // namespace ooc
