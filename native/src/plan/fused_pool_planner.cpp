#include <algorithm>
#include <stdexcept>

#include "plan/candidate_search.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/cost_model.hpp"
#include "plan/fused_planner.hpp"
#include "plan/layer_planner.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {
namespace {

using namespace planner_parts;  // NOLINT: the shared planner pieces

// The tiles of one spatial dimension of the pooled output: per tile the pooled rows written back
// (q) and computed (q_computed), the y rows their windows need (y) and the x rows those read (x).
struct PoolDim {
  int64_t tile = 1, tiles = 1;
  std::vector<Range> q, q_computed, y, x;
  int64_t q_max = 0, y_max = 0, x_max = 0, y_sum = 0, x_sum = 0;
};

PoolDim pool_dim(const ConvProblem& conv, const ConvProblem& pool, int d, int64_t tile) {
  PoolDim t;
  t.tile = tile;
  t.tiles = ceil_div(pool.out[d], tile);
  for (int64_t i = 0; i < t.tiles; ++i) {
    const Range q{i * tile, std::min((i + 1) * tile, pool.out[d])};
    const PoolRows rows = pool_rows(q, pool.in[d], pool.out[d], pool.kernel[d], pool.stride[d], pool.padding[d]);
    // A whole dimension: cuDNN pads x itself; split: the y rows' halo of x, zeros outside it.
    const Range x = t.tiles == 1 ? Range{0, conv.in[d]}
                                 : conv_input_range(rows.x, conv.kernel[d], conv.stride[d], conv.padding[d],
                                                    conv.dilation[d]);
    t.q.push_back(q);
    t.q_computed.push_back(rows.y);
    t.y.push_back(rows.x);
    t.x.push_back(x);
    t.q_max = std::max(t.q_max, rows.y.size());
    t.y_max = std::max(t.y_max, rows.x.size());
    t.x_max = std::max(t.x_max, x.size());
    t.y_sum += rows.x.size();
    t.x_sum += x.size();
  }
  return t;
}

struct Candidate {
  std::array<const PoolDim*, kMaxSpatial> dims{};
  int64_t tn = 1, tk = 1, tc = 1, tiles_n = 1, tiles_k = 1, tiles_c = 1;
  int buffers = 3, x_slots = 1, w_slots = 1, out_slots = 1;
  int64_t w_loads = 1;
  size_t x_slot = 0, w_slot = 0, out_slot = 0, scratch = 0, peak = 0;
  double bytes_h2d = 0, bytes_d2h = 0;
};

std::vector<Chunk> expand_chunks(const ConvProblem& conv, const Candidate& c) {
  std::vector<Chunk> chunks;
  const auto range = [](int64_t t, int64_t tile, int64_t extent) {
    return Range{t * tile, std::min((t + 1) * tile, extent)};
  };
  const std::array<int64_t, kMaxSpatial> tiles{c.dims[0]->tiles, c.dims[1]->tiles, c.dims[2]->tiles};
  for (int64_t nt = 0; nt < c.tiles_n; ++nt)
    for (int64_t s0 = 0; s0 < tiles[0]; ++s0)
      for (int64_t s1 = 0; s1 < tiles[1]; ++s1)
        for (int64_t s2 = 0; s2 < tiles[2]; ++s2)
          for (int64_t kt = 0; kt < c.tiles_k; ++kt)
            for (int64_t ct = 0; ct < c.tiles_c; ++ct) {
              const std::array<int64_t, kMaxSpatial> s{s0, s1, s2};
              Chunk ch;
              ch.n = range(nt, c.tn, conv.n);
              ch.k = range(kt, c.tk, conv.k);
              ch.c = range(ct, c.tc, conv.c);
              for (int d = 0; d < kMaxSpatial; ++d) {
                const PoolDim& pd = *c.dims[d];
                ch.out[d] = pd.y[s[d]];
                ch.in[d] = pd.x[s[d]];
                ch.out_read[d] = pd.q_computed[s[d]];
                ch.target[d] = pd.q[s[d]];
                ch.compute_padding[d] = pd.tiles == 1 ? conv.padding[d] : 0;
              }
              ch.first_c = ct == 0;
              ch.last_c = ct == c.tiles_c - 1;
              if (!chunks.empty()) {
                const Chunk& prev = chunks.back();
                ch.load_x = !(prev.n == ch.n && prev.c == ch.c && prev.in == ch.in);
                ch.load_w = !(prev.k == ch.k && prev.c == ch.c);
              }
              chunks.push_back(ch);
            }
  return chunks;
}

// The forward planner's tilings of n, k and c over every tiling of the pooled output, at every
// pipeline depth; of equally fast ones the search keeps the first.
void offer_candidates(const ConvProblem& conv, const ConvProblem& pool, const PlannerConfig& config,
                      const std::array<std::vector<PoolDim>, kMaxSpatial>& options,
                      CandidateSearch<Candidate>& search) {
  const double es = static_cast<double>(dtype_size(conv.dtype));
  const int64_t kernel = conv.kernel[0] * conv.kernel[1] * conv.kernel[2];
  const size_t bias_bytes = bias_slot(conv);
  const std::array<int64_t, 5> x_extent{conv.n, conv.c, conv.in[0], conv.in[1], conv.in[2]};
  const std::array<int64_t, 5> q_extent{pool.n, pool.c, pool.out[0], pool.out[1], pool.out[2]};
  Candidate c;
  for (const PoolDim& d0 : options[0])
    for (const PoolDim& d1 : options[1])
      for (const PoolDim& d2 : options[2]) {
        c.dims = {&d0, &d1, &d2};
        const int64_t y_rows = d0.y_max * d1.y_max * d2.y_max, x_rows = d0.x_max * d1.x_max * d2.x_max,
                      q_rows = d0.q_max * d1.q_max * d2.q_max, tiles_s = d0.tiles * d1.tiles * d2.tiles;
        const double x_once = static_cast<double>(conv.n * conv.c) * d0.x_sum * d1.x_sum * d2.x_sum * es;
        const double z_moved = static_cast<double>(conv.n * conv.k) * d0.y_sum * d1.y_sum * d2.y_sum * es;
        for (int64_t tk : candidate_tiles(conv.k))
          for (int64_t tc : candidate_tiles(conv.c))
            for (int64_t tn : candidate_tiles(conv.n)) {
              c.tn = tn, c.tk = tk, c.tc = tc;
              c.tiles_n = ceil_div(conv.n, tn), c.tiles_k = ceil_div(conv.k, tk), c.tiles_c = ceil_div(conv.c, tc);
              const int64_t tiles_ns = c.tiles_n * tiles_s, total = tiles_ns * c.tiles_k * c.tiles_c;
              const int64_t largest = std::max({tn * tc * x_rows, tk * tc * kernel, tn * tk * y_rows});
              if (!search.within_limits(largest, static_cast<double>(total))) continue;
              c.x_slot = slot_bytes(tn * tc * x_rows, es);
              c.w_slot = slot_bytes(tk * tc * kernel, es);
              // The y tile accumulates there, and the pooled tile is copied back into it to leave.
              c.out_slot = std::max(slot_bytes(tn * tk * y_rows, es), slot_bytes(tn * tk * q_rows, es));
              c.scratch = slot_bytes(tn * tk * q_rows, es);
              // x is reused across k-tiles when c is whole; w across chunks when k and c are.
              const int64_t x_loads = c.tiles_c == 1 ? tiles_ns : total;
              c.w_loads = c.tiles_k == 1 && c.tiles_c == 1 ? 1 : total;
              c.bytes_h2d = x_once * (c.tiles_c == 1 ? 1.0 : static_cast<double>(c.tiles_k)) +
                            static_cast<double>(conv.w_elements()) * es * (c.w_loads == 1 ? 1.0 : tiles_ns) +
                            (conv.beta != 0.0 ? z_moved : 0.0) + (conv.has_bias ? conv.k * es : 0.0);
              c.bytes_d2h = static_cast<double>(pool.y_elements()) * es;
              // The y rows two tiles' windows share are computed twice.
              const double flops = conv.flops() * static_cast<double>(d0.y_sum * d1.y_sum * d2.y_sum) /
                                   static_cast<double>(conv.out[0] * conv.out[1] * conv.out[2]);
              TrafficEstimate t = traffic_estimate(c.bytes_h2d, c.bytes_d2h, flops, static_cast<double>(total));
              t.reduction_depth = static_cast<double>(tc * kernel);
              t.output_channels = static_cast<double>(tk);
              t.copy_run_bytes = shortest_run_bytes(es, {CopyRegion{{tn, tc, d0.x_max, d1.x_max, d2.x_max}, x_extent},
                                                         CopyRegion{{tn, tk, d0.q_max, d1.q_max, d2.q_max}, q_extent}});
              t.first_load_bytes = static_cast<double>(c.x_slot + c.w_slot);
              t.last_store_bytes = static_cast<double>(c.scratch);
              for (int buffers : {3, 2, 1}) {
                if (buffers > 1 && buffers > tiles_ns * c.tiles_k) continue;  // idle output slots
                c.buffers = buffers;
                c.x_slots = static_cast<int>(std::min<int64_t>(buffers, x_loads));
                c.w_slots = static_cast<int>(std::min<int64_t>(buffers, c.w_loads));
                c.out_slots = buffers;
                c.peak = c.x_slots * c.x_slot + c.w_slots * c.w_slot + c.out_slots * c.out_slot + c.scratch +
                         bias_bytes + config.workspace_bytes;
                search.offer(c, {c.peak, largest, static_cast<double>(total)}, [&] {
                  TrafficEstimate at_depth = t;
                  at_depth.buffers = buffers;
                  return predict_seconds(at_depth, config.machine);
                });
              }
            }
      }
}

Plan plan_of(const ConvProblem& conv, const PlannerConfig& config, const Candidate& best, double seconds) {
  Plan plan = plan_with_totals(conv, config, config.workspace_bytes, best.peak, best.bytes_h2d, best.bytes_d2h,
                               seconds);
  plan.fused = "conv_bias_activation_pooling_forward";
  plan.tiling = Tiling{best.tn, best.tk, best.tc, {best.dims[0]->tile, best.dims[1]->tile, best.dims[2]->tile}};
  plan.splits_n = best.tiles_n;
  plan.splits_k = best.tiles_k;
  plan.splits_c = best.tiles_c;
  for (int d = 0; d < kMaxSpatial; ++d) plan.splits_out[d] = best.dims[d]->tiles;
  plan.order = LoopOrder::ns_outer;
  plan.buffers = plan.y_buffers = best.out_slots;
  set_x_w_slots(plan, best.x_slots, best.x_slot, best.w_slots, best.w_slot, best.w_loads == 1);
  plan.y_slot_bytes = best.out_slot;
  plan.bias_buffers = conv.has_bias ? 1 : 0;
  plan.bias_bytes = bias_slot(conv);
  plan.scratch_bytes = best.scratch;
  add_block_slot(plan, SlotKind::scratch, "pooled tile", 0, best.scratch);
  plan.chunks = expand_chunks(conv, best);
  return plan;
}

Plan plan_with_workspace(const ConvProblem& conv, const ConvProblem& pool, const PlannerConfig& config) {
  std::array<std::vector<PoolDim>, kMaxSpatial> options;
  for (int d = 0; d < kMaxSpatial; ++d)
    for (int64_t t : candidate_tiles(pool.out[d]))
      if (tiles_within_limit(ceil_div(pool.out[d], t))) options[d].push_back(pool_dim(conv, pool, d, t));
  return search_plan<Candidate>(
      config.memory_limit, [&](auto& search) { offer_candidates(conv, pool, config, options, search); },
      [&](const Candidate& best, double seconds) { return plan_of(conv, config, best, seconds); },
      [&](size_t need) { throw_out_of_budget(conv, config.memory_limit, need, config.workspace_bytes != 0); });
}

}  // namespace

Plan plan_conv_bias_activation_pooling_forward_for(const ConvProblem& conv, const ConvProblem& pool,
                                                   const PlannerConfig& config) {
  if (conv.op != Operation::forward || pool.op != Operation::pool_forward)
    throw std::logic_error("fused pooling planner: not a forward convolution and a pooling");
  planner_parts::require_ungrouped(conv, "conv_bias_activation_pooling_forward",
                                   "conv_bias_activation_forward followed by pool_forward");
  planner_parts::require_symmetric_padding(conv, "conv_bias_activation_pooling_forward");
  return with_grown_workspace(
      with_workspace_fallback(config, [&](const PlannerConfig& c) { return plan_with_workspace(conv, pool, c); }),
      config);
}

}  // namespace ooc
