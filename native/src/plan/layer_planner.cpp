#include "plan/layer_planner.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

#include "ooc/errors.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/planner_parts.hpp"
#include "plan/shape_format.hpp"

namespace ooc {
namespace {

using Extent5 = std::array<int64_t, 5>;
using planner_parts::ceil_div;
using planner_parts::slot_bytes;

int64_t product(const Extent5& e) { return e[0] * e[1] * e[2] * e[3] * e[4]; }

Extent5 broadcast_tile(const LayerPlanSpec& spec, const Extent5& tile) {
  Extent5 a{};
  for (int d = 0; d < 5; ++d) a[d] = spec.broadcast_full[d] ? tile[d] : 1;
  return a;
}

// Calls f(chunk) for each tile of `extent` (n, c, out...) in row-major order: n, c (== k) and out set.
template <typename F>
void for_each_box(const Extent5& extent, const Extent5& tile, F f) {
  Extent5 splits{};
  for (int d = 0; d < 5; ++d) splits[d] = ceil_div(extent[d], tile[d]);
  const auto range = [&](int64_t i, int d) { return Range{i * tile[d], std::min(extent[d], (i + 1) * tile[d])}; };
  for (int64_t in = 0; in < splits[0]; ++in)
    for (int64_t ic = 0; ic < splits[1]; ++ic)
      for (int64_t i0 = 0; i0 < splits[2]; ++i0)
        for (int64_t i1 = 0; i1 < splits[3]; ++i1)
          for (int64_t i2 = 0; i2 < splits[4]; ++i2) {
            Chunk ch;
            ch.n = range(in, 0);
            ch.c = ch.k = range(ic, 1);
            ch.out = {range(i0, 2), range(i1, 3), range(i2, 4)};
            ch.load_x = ch.load_w = ch.load_y = true;
            f(ch);
          }
}

// Largest tile that `fits`, splitting outer dims first (inner ones only once the outer are 1).
template <typename Fits>
bool largest_tile(const Extent5& extent, const std::array<bool, 5>& splittable, Extent5& tile, Fits fits) {
  tile = extent;
  if (fits(tile)) return true;
  for (int d = 0; d < 5; ++d) {
    if (!splittable[d]) continue;
    for (int64_t t : planner_parts::candidate_tiles(extent[d])) {
      tile[d] = t;
      if (fits(tile)) return true;
    }
  }
  return false;
}

void set_tiling(Plan& plan, const Extent5& extent, const Extent5& tile) {
  plan.tiling.n = tile[0];
  plan.tiling.c = plan.tiling.k = tile[1];
  plan.tiling.out = {tile[2], tile[3], tile[4]};
  plan.splits_n = ceil_div(extent[0], tile[0]);
  plan.splits_c = plan.splits_k = ceil_div(extent[1], tile[1]);
  for (int d = 0; d < 3; ++d) plan.splits_out[d] = ceil_div(extent[2 + d], tile[2 + d]);
}

double predicted_seconds(const ConvProblem& p, const Plan& plan, const MachineModel& m) {
  return std::max({plan.bytes_h2d / m.h2d_bytes_per_s, plan.bytes_d2h / m.d2h_bytes_per_s,
                   (plan.bytes_h2d + plan.bytes_d2h) / m.bidir_bytes_per_s, p.flops() / m.flops_per_s}) +
         static_cast<double>(plan.chunks.size()) * m.chunk_overhead_s;
}

Plan plan_header(const ConvProblem& p, const PlannerConfig& config, int buffers) {
  Plan plan;
  plan.problem = p;
  plan.backend = config.backend;
  plan.machine = config.machine;
  plan.memory_limit = config.memory_limit;
  plan.order = LoopOrder::ns_outer;
  plan.buffers = buffers;
  return plan;
}

size_t peak_bytes(const LayerPlanSpec& spec, const Extent5& tile, int buffers, double es) {
  const size_t full = slot_bytes(product(tile), es);
  const size_t a = spec.has_broadcast ? slot_bytes(product(broadcast_tile(spec, tile)), es) : 0;
  return static_cast<size_t>(buffers) * (static_cast<size_t>(spec.full_inputs) * full + a + full);
}

}  // namespace

Plan plan_layer(const ConvProblem& p, const LayerPlanSpec& spec, const PlannerConfig& config) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const Extent5 extent{p.n, p.c, p.in[0], p.in[1], p.in[2]};
  const size_t budget = config.memory_limit;
  size_t smallest = std::numeric_limits<size_t>::max();
  for (int buffers : {3, 2, 1}) {
    // Largest tile of each dim in turn, outermost first; inner dims split only once outer ones are 1.
    Extent5 tile;
    const bool fits = largest_tile(extent, spec.splittable, tile, [&](const Extent5& t) {
      return product(t) <= kMaxChunkElements && peak_bytes(spec, t, buffers, es) <= budget;
    });
    if (product(tile) <= kMaxChunkElements) smallest = std::min(smallest, peak_bytes(spec, tile, buffers, es));
    if (!fits) continue;

    Plan plan = plan_header(p, config, buffers);
    set_tiling(plan, extent, tile);
    const size_t chunks = static_cast<size_t>(plan.splits_n * plan.splits_c * plan.splits_out[0] *
                                              plan.splits_out[1] * plan.splits_out[2]);
    if (chunks > planner_parts::kMaxChunks) continue;
    plan.x_buffers = buffers * spec.full_inputs;
    plan.x_slot_bytes = slot_bytes(product(tile), es);
    plan.w_buffers = spec.has_broadcast ? buffers : 0;
    plan.w_slot_bytes = spec.has_broadcast ? slot_bytes(product(broadcast_tile(spec, tile)), es) : 0;
    plan.y_buffers = buffers;
    plan.y_slot_bytes = slot_bytes(product(tile), es);
    plan.peak_device_bytes = peak_bytes(spec, tile, buffers, es);

    size_t a_bytes = 0;
    for_each_box(extent, tile, [&](Chunk& ch) {
      for (int d = 0; d < 3; ++d) ch.in[d] = ch.target[d] = ch.out_read[d] = ch.out[d];
      if (spec.has_broadcast) {
        const Extent5 box{ch.n.size(), ch.c.size(), ch.in[0].size(), ch.in[1].size(), ch.in[2].size()};
        a_bytes += static_cast<size_t>(product(broadcast_tile(spec, box)) * es);
      }
      plan.chunks.push_back(ch);
    });
    const size_t tensor_bytes = static_cast<size_t>(static_cast<double>(product(extent)) * es);
    plan.bytes_h2d = tensor_bytes * static_cast<size_t>(spec.full_inputs + (spec.reads_output ? 1 : 0)) + a_bytes;
    plan.bytes_d2h = tensor_bytes;
    plan.predicted_seconds = predicted_seconds(p, plan, config.machine);
    return plan;
  }
  if (spec.whole && smallest != std::numeric_limits<size_t>::max()) {
    std::ostringstream msg;
    msg << "memory_limit of " << format_bytes(static_cast<double>(budget)) << " is too small for " << p.describe()
        << ": " << spec.whole << " must fit on the device whole, and the smallest plan needs "
        << format_bytes(static_cast<double>(smallest)) << " (" << smallest << " bytes)";
    throw out_of_budget(msg.str(), smallest);
  }
  planner_parts::throw_out_of_budget(p, budget, smallest, false);
}

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
  const double es = static_cast<double>(dtype_size(p.dtype));
  const Extent5 extent{p.n, p.c, p.out[0], p.out[1], p.out[2]};
  const auto rows = [&](Range tile, int d) {
    return pool_rows(tile, p.in[d], p.out[d], p.kernel[d], p.stride[d], p.padding[d]);
  };
  // Largest x and y extents of any tile along each dim.
  const auto slots = [&](const Extent5& t) {
    Extent5 xs{t[0], t[1], 1, 1, 1}, ys{t[0], t[1], 1, 1, 1};
    for (int d = 0; d < 3; ++d) {
      int64_t xm = 0, ym = 0;
      for (int64_t b = 0; b < extent[2 + d]; b += t[2 + d]) {
        const PoolRows r = rows(Range{b, std::min(extent[2 + d], b + t[2 + d])}, d);
        xm = std::max(xm, r.x.size());
        ym = std::max(ym, r.y.size());
      }
      xs[2 + d] = xm;
      ys[2 + d] = ym;
    }
    return std::make_pair(xs, ys);
  };
  const auto peak = [&](const Extent5& t, int buffers) {
    const auto [xs, ys] = slots(t);
    return static_cast<size_t>(buffers) * (slot_bytes(product(xs), es) + slot_bytes(product(ys), es));
  };
  size_t smallest = std::numeric_limits<size_t>::max();
  for (int buffers : {3, 2, 1}) {
    Extent5 tile;
    const bool fits = largest_tile(extent, {true, true, true, true, true}, tile, [&](const Extent5& t) {
      return product(slots(t).first) <= kMaxChunkElements && peak(t, buffers) <= config.memory_limit;
    });
    if (product(slots(tile).first) <= kMaxChunkElements) smallest = std::min(smallest, peak(tile, buffers));
    if (!fits) continue;
    Plan plan = plan_header(p, config, buffers);
    set_tiling(plan, extent, tile);
    const auto [xs, ys] = slots(tile);
    plan.x_buffers = plan.y_buffers = buffers;
    plan.w_buffers = 0;
    plan.x_slot_bytes = slot_bytes(product(xs), es);
    plan.y_slot_bytes = slot_bytes(product(ys), es);
    plan.peak_device_bytes = peak(tile, buffers);
    for_each_box(extent, tile, [&](Chunk& ch) {
      size_t x_elements = static_cast<size_t>(ch.n.size() * ch.c.size());
      for (int d = 0; d < 3; ++d) {
        const PoolRows r = rows(ch.out[d], d);
        ch.target[d] = ch.out_read[d] = ch.out[d];  // the y rows written back
        ch.out[d] = r.y;                             // the y rows computed
        ch.in[d] = r.x;
        ch.compute_padding[d] = p.padding[d];
        x_elements *= static_cast<size_t>(r.x.size());
      }
      plan.bytes_h2d += static_cast<size_t>(static_cast<double>(x_elements) * es);
      plan.chunks.push_back(ch);
    });
    if (plan.chunks.size() > planner_parts::kMaxChunks) continue;
    plan.bytes_d2h = static_cast<size_t>(static_cast<double>(p.y_elements()) * es);
    if (p.beta != 0.0) plan.bytes_h2d += plan.bytes_d2h;  // y is loaded to be blended into
    plan.predicted_seconds = predicted_seconds(p, plan, config.machine);
    return plan;
  }
  planner_parts::throw_out_of_budget(p, config.memory_limit, smallest, false);
}

Plan plan_pool_backward_for(const ConvProblem& p, const PlannerConfig& config) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const Extent5 extent{p.n, p.c, p.in[0], p.in[1], p.in[2]};
  const std::array<bool, 5> splittable{true, true, p.padding[0] == 0, p.padding[1] == 0, p.padding[2] == 0};
  // The rows of one spatial dim a dx tile needs: whole dims (tile == extent) compute everything
  // with cuDNN's own padding; split ones (padding 0) follow backward data (conv_geometry.hpp).
  const auto rows = [&](Range target, int d, bool whole) {
    if (whole) return BackwardDataRows{Range{0, p.out[d]}, Range{0, p.out[d]}, Range{0, p.in[d]}};
    return backward_data_rows(target, p.out[d], p.kernel[d], p.stride[d], 0, 1);
  };
  // Largest x / dx and y / dy extents of any tile along each dim.
  const auto slots = [&](const Extent5& t) {
    Extent5 xs{t[0], t[1], 1, 1, 1}, ys{t[0], t[1], 1, 1, 1};
    for (int d = 0; d < 3; ++d) {
      const bool whole = t[2 + d] == extent[2 + d];
      int64_t xm = 0, ym = 0;
      for (int64_t b = 0; b < extent[2 + d]; b += t[2 + d]) {
        const BackwardDataRows r = rows(Range{b, std::min(extent[2 + d], b + t[2 + d])}, d, whole);
        xm = std::max(xm, r.computed.size());
        ym = std::max(ym, r.dy_rows.size());
      }
      xs[2 + d] = xm;
      ys[2 + d] = ym;
    }
    return std::make_pair(xs, ys);
  };
  const auto peak = [&](const Extent5& t, int buffers) {
    const auto [xs, ys] = slots(t);
    return static_cast<size_t>(buffers) * 2 * (slot_bytes(product(xs), es) + slot_bytes(product(ys), es));
  };
  size_t smallest = std::numeric_limits<size_t>::max();
  for (int buffers : {3, 2, 1}) {
    Extent5 tile;
    const bool fits = largest_tile(extent, splittable, tile, [&](const Extent5& t) {
      return product(slots(t).first) <= kMaxChunkElements && peak(t, buffers) <= config.memory_limit;
    });
    if (product(slots(tile).first) <= kMaxChunkElements) smallest = std::min(smallest, peak(tile, buffers));
    if (!fits) continue;
    Plan plan = plan_header(p, config, buffers);
    set_tiling(plan, extent, tile);
    const auto [xs, ys] = slots(tile);
    plan.x_buffers = plan.y_buffers = 2 * buffers;  // x and dx; y and dy
    plan.w_buffers = 0;
    plan.x_slot_bytes = slot_bytes(product(xs), es);
    plan.y_slot_bytes = slot_bytes(product(ys), es);
    plan.peak_device_bytes = peak(tile, buffers);
    for_each_box(extent, tile, [&](Chunk& ch) {
      size_t moved = 0, nc = static_cast<size_t>(ch.n.size() * ch.c.size());
      size_t x_elems = nc, y_elems = nc, dy_elems = nc;
      for (int d = 0; d < 3; ++d) {
        ch.target[d] = ch.out[d];  // for_each_box tiled dx's extent into `out`
        const BackwardDataRows r = rows(ch.target[d], d, tile[2 + d] == extent[2 + d]);
        ch.in[d] = r.computed;
        ch.out[d] = r.dy_rows;
        ch.out_read[d] = r.read;
        ch.compute_padding[d] = p.padding[d];
        x_elems *= static_cast<size_t>(r.computed.size());
        y_elems *= static_cast<size_t>(r.dy_rows.size());
        dy_elems *= static_cast<size_t>(r.read.size());
      }
      moved = x_elems + y_elems + dy_elems;
      plan.bytes_h2d += static_cast<size_t>(static_cast<double>(moved) * es);
      plan.chunks.push_back(ch);
    });
    if (plan.chunks.size() > planner_parts::kMaxChunks) continue;
    plan.bytes_d2h = static_cast<size_t>(static_cast<double>(p.x_elements()) * es);
    if (p.beta != 0.0) plan.bytes_h2d += plan.bytes_d2h;  // dx is loaded to be blended into
    plan.predicted_seconds = predicted_seconds(p, plan, config.machine);
    return plan;
  }
  planner_parts::throw_out_of_budget(p, config.memory_limit, smallest, false);
}

}  // namespace ooc
