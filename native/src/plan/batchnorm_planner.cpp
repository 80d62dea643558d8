#include "plan/box_tiling.hpp"
#include "plan/candidate_search.hpp"
#include "plan/cost_model.hpp"
#include "plan/layer_planners.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {

using namespace planner_parts;

namespace {

struct BatchnormCandidate {
  Extent5 tile{};
  int buffers = 3;
  size_t x_slot = 0, out_slot = 0, peak = 0;
  double h2d = 0, d2h = 0;
};

struct BatchnormShape {
  bool backward;
  int passes;             // 1 (inference) or 2 (training, backward: reduce, then apply)
  Extent5 extent;
  double x_bytes;
  size_t coef_slot;       // per-channel coefficients, resident
};

BatchnormShape shape_of(const ConvProblem& p) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const bool backward = p.op == Operation::batchnorm_backward;
  // (scale, shift) per channel for the forward, 3 per channel for dx.
  return {backward, p.op == Operation::batchnorm_forward_inference ? 1 : 2, {p.n, p.c, p.in[0], p.in[1], p.in[2]},
          static_cast<double>(p.n) * p.c * p.in[0] * p.in[1] * p.in[2] * es,
          slot_bytes(p.c * (backward ? 3 : 2), kBatchnormCoefBytes)};
}

// Every tile of the ladder (the whole tensor down, n split first) at every pipeline depth; of
// equally fast ones the search keeps the first.
void offer_candidates(const ConvProblem& p, const PlannerConfig& cfg, CandidateSearch<BatchnormCandidate>& search) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const BatchnormShape s = shape_of(p);
  for (const Extent5& tile : tile_ladder(s.extent, {true, true, true, true, true})) {
    const int64_t elements = product(tile);
    const int64_t chunks = box_count(s.extent, tile);
    if (!search.within_limits(elements, static_cast<double>(chunks))) continue;
    for (int bufs : {3, 2, 1}) {
      if (bufs > 1 && chunks == 1) continue;
      BatchnormCandidate c;
      c.tile = tile;
      c.buffers = bufs;
      c.x_slot = slot_bytes(elements, es);
      // The output slot also holds a pass-1 chunk's per-channel pair (mean, M2 or the grad sums).
      c.out_slot = std::max(c.x_slot, slot_bytes(2 * tile[1], kBatchnormPartialBytes));
      c.peak = bufs * c.x_slot * (s.backward ? 2 : 1) + bufs * c.out_slot + s.coef_slot;
      const double in_bytes = s.x_bytes * (s.backward ? 2 : 1);
      const double partial_bytes = s.passes == 2 ? chunks * 2.0 * tile[1] * kBatchnormPartialBytes : 0;
      c.h2d = s.passes * in_bytes + s.coef_slot + (p.beta != 0.0 ? s.x_bytes : 0.0);  // beta: y / dx loaded
      c.d2h = s.x_bytes + partial_bytes;
      search.offer(c, {c.peak, elements, static_cast<double>(chunks)}, [&] {
        const double flops = (s.backward ? 8.0 : 5.0) * s.x_bytes / es;
        TrafficEstimate t = traffic_estimate(c.h2d, c.d2h, flops, static_cast<double>(chunks * s.passes));
        t.copy_run_bytes = shortest_run_bytes(es, {CopyRegion{tile, s.extent}});
        t.first_load_bytes = static_cast<double>(c.x_slot);
        t.last_store_bytes = static_cast<double>(c.x_slot);
        t.buffers = bufs;
        return predict_seconds(t, cfg.machine);
      });
    }
  }
}

// Every chunk independent; k: the chunk's row in the per-chunk statistics table.
Plan plan_of(const ConvProblem& p, const PlannerConfig& cfg, const BatchnormCandidate& best, double seconds) {
  const BatchnormShape s = shape_of(p);
  Plan plan = plan_with_totals(p, cfg, 0, best.peak, best.h2d, best.d2h, seconds);
  plan.passes = s.passes;
  set_box_tiling(plan, s.extent, best.tile);
  plan.buffers = plan.x_buffers = plan.y_buffers = best.buffers;
  plan.w_buffers = s.backward ? best.buffers : 0;
  plan.bias_buffers = 1;
  plan.x_slot_bytes = best.x_slot;
  plan.w_slot_bytes = s.backward ? best.x_slot : 0;
  plan.y_slot_bytes = best.out_slot;
  plan.bias_bytes = s.coef_slot;
  int64_t index = 0;
  for_each_box(s.extent, best.tile, [&](Chunk& ch) {
    ch.k = {index, index + 1};
    ++index;
    ch.in = ch.out;
    ch.load_y = s.backward;
    plan.chunks.push_back(ch);
  });
  return plan;
}

}  // namespace

Plan plan_batchnorm_for(const ConvProblem& p, const PlannerConfig& cfg) {
  return search_plan<BatchnormCandidate>(
      cfg.memory_limit, [&](auto& search) { offer_candidates(p, cfg, search); },
      [&](const BatchnormCandidate& best, double seconds) { return plan_of(p, cfg, best, seconds); },
      [&](size_t need) { throw_out_of_budget(p, cfg.memory_limit, need, false); });
}

}  // namespace ooc
