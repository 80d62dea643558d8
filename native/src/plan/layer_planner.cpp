// The planner of the element-wise and per-position layers (layer_planner.hpp): the first box
// tiling that fits, each box streamed through its inputs' and output's slots.
#include "plan/layer_planner.hpp"

#include "plan/box_search.hpp"
#include "plan/box_tiling.hpp"
#include "plan/cost_model.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {
namespace {

using namespace planner_parts;  // NOLINT: the shared planner pieces

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
  const auto footprint = [&](const Extent5& tile, int buffers) {
    return Footprint{peak_bytes(spec, tile, buffers, es), product(tile), static_cast<double>(box_count(extent, tile))};
  };
  const auto expand = [&](const Extent5& tile, int buffers) {
    Plan plan = box_plan_header(p, config, extent, tile, buffers);
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
    plan.predicted_seconds = predict_layer_seconds(plan.bytes_h2d, plan.bytes_d2h, p.flops(), plan.chunks.size(),
                                                   config.machine);
    return plan;
  };
  return plan_first_fitting_box(p, config, extent, spec.splittable, spec.whole, footprint, expand);
}

}  // namespace ooc
