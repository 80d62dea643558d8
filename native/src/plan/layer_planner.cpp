#include "plan/layer_planner.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

#include "ooc/errors.hpp"
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
    Extent5 tile = extent;
    bool fits = false;
    auto ok = [&](const Extent5& t) {
      return product(t) <= kMaxChunkElements && peak_bytes(spec, t, buffers, es) <= budget;
    };
    fits = ok(tile);
    for (int d = 0; d < 5 && !fits; ++d) {
      if (!spec.splittable[d]) continue;
      for (int64_t t : planner_parts::candidate_tiles(extent[d])) {
        tile[d] = t;
        if (ok(tile)) { fits = true; break; }
      }
    }
    if (product(tile) <= kMaxChunkElements) smallest = std::min(smallest, peak_bytes(spec, tile, buffers, es));
    if (!fits) continue;

    Plan plan;
    plan.problem = p;
    plan.backend = config.backend;
    plan.machine = config.machine;
    plan.memory_limit = budget;
    plan.order = LoopOrder::ns_outer;
    plan.buffers = buffers;
    plan.tiling.n = tile[0];
    plan.tiling.c = plan.tiling.k = tile[1];
    plan.tiling.out = {tile[2], tile[3], tile[4]};
    plan.splits_n = ceil_div(extent[0], tile[0]);
    plan.splits_c = plan.splits_k = ceil_div(extent[1], tile[1]);
    for (int d = 0; d < 3; ++d) plan.splits_out[d] = ceil_div(extent[2 + d], tile[2 + d]);
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

    const auto range = [](int64_t i, int64_t t, int64_t e) { return Range{i * t, std::min(e, (i + 1) * t)}; };
    size_t a_bytes = 0;
    for (int64_t in = 0; in < plan.splits_n; ++in)
      for (int64_t ic = 0; ic < plan.splits_c; ++ic)
        for (int64_t i0 = 0; i0 < plan.splits_out[0]; ++i0)
          for (int64_t i1 = 0; i1 < plan.splits_out[1]; ++i1)
            for (int64_t i2 = 0; i2 < plan.splits_out[2]; ++i2) {
              Chunk ch;
              ch.n = range(in, tile[0], extent[0]);
              ch.c = ch.k = range(ic, tile[1], extent[1]);
              const int64_t idx[3] = {i0, i1, i2};
              for (int d = 0; d < 3; ++d)
                ch.out[d] = ch.in[d] = ch.target[d] = ch.out_read[d] = range(idx[d], tile[2 + d], extent[2 + d]);
              ch.load_x = ch.load_w = ch.load_y = true;
              if (spec.has_broadcast) {
                const Extent5 box{ch.n.size(), ch.c.size(), ch.in[0].size(), ch.in[1].size(), ch.in[2].size()};
                a_bytes += static_cast<size_t>(product(broadcast_tile(spec, box)) * es);
              }
              plan.chunks.push_back(ch);
            }
    const size_t tensor_bytes = static_cast<size_t>(static_cast<double>(product(extent)) * es);
    plan.bytes_h2d = tensor_bytes * static_cast<size_t>(spec.full_inputs + (spec.reads_output ? 1 : 0)) + a_bytes;
    plan.bytes_d2h = tensor_bytes;
    const MachineModel& m = config.machine;
    plan.predicted_seconds =
        std::max({plan.bytes_h2d / m.h2d_bytes_per_s, plan.bytes_d2h / m.d2h_bytes_per_s,
                  (plan.bytes_h2d + plan.bytes_d2h) / m.bidir_bytes_per_s, p.flops() / m.flops_per_s}) +
        static_cast<double>(chunks) * m.chunk_overhead_s;
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

}  // namespace ooc
