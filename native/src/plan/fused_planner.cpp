#include "plan/fused_planner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "plan/candidate_search.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/cost_model.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {
namespace {

using namespace planner_parts;  // NOLINT: the shared planner pieces

// The tiles of one spatial dimension: per tile the dy rows it owns (disjoint, covering dy), the dx
// rows it computes from them with padding 0 (its x slab too), the dx rows it writes back (disjoint,
// covering dx) and how many computed rows past those it carries to the next tile.
// With a pooling folded in, also the extents the dy tile's pooled and y rows (pooled_rows) take.
struct DimTiles {
  int64_t tile = 1, tiles = 1;
  std::vector<Range> dy, computed, target;
  std::vector<int64_t> carried;
  int64_t dy_max = 0, x_max = 0, x_sum = 0, carry_max = 0;
  int64_t pooled_max = 0, pooled_sum = 0, y_max = 0, y_sum = 0;
};

// Adds the pooled and y rows of the tiles (pool: folded in, or null).
void add_pooled_rows(DimTiles& t, const ConvProblem* pool, int d) {
  for (const Range& dy : t.dy) {
    const PooledRows r = pool ? pooled_rows(*pool, d, dy, t.tiles == 1) : PooledRows{dy, dy};
    t.pooled_max = std::max(t.pooled_max, r.pooled.size());
    t.pooled_sum += r.pooled.size();
    t.y_max = std::max(t.y_max, r.y.size());
    t.y_sum += r.y.size();
  }
}

// Whole: cuDNN pads the dimension itself; nothing is carried.
DimTiles whole_dim(const ConvProblem& p, int d) {
  DimTiles t;
  t.tile = p.out[d];
  t.dy = {Range{0, p.out[d]}};
  t.computed = t.target = {Range{0, p.in[d]}};
  t.carried = {0};
  t.dy_max = p.out[d];
  t.x_max = t.x_sum = p.in[d];
  return t;
}

// dy rows [s * tile, ...) per tile s. Tile s reaches dx rows conv_input_range(its dy rows), which
// starts at b_s = s * tile * stride - padding; the rows before b_{s+1} are reached by no later tile,
// so tile s writes back [b_s, b_{s+1}) (clamped to dx) and carries its computed rows from b_{s+1}
// on. Its computed region ends where its reach does, or (stride > dilated kernel: rows no tap
// reaches) where its target does, at most stride - 1 rows later: cuDNN's output size still matches
// its dy rows.
DimTiles split_dim(const ConvProblem& p, int d, int64_t tile) {
  DimTiles t;
  t.tile = tile;
  t.tiles = ceil_div(p.out[d], tile);
  auto boundary = [&](int64_t s) {
    if (s == 0) return int64_t{0};
    if (s == t.tiles) return p.in[d];
    return std::clamp<int64_t>(s * tile * p.stride[d] - p.padding[d], 0, p.in[d]);
  };
  for (int64_t s = 0; s < t.tiles; ++s) {
    const Range dy{s * tile, std::min((s + 1) * tile, p.out[d])};
    const Range reach = conv_input_range(dy, p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]);
    const Range target{boundary(s), boundary(s + 1)};
    const Range computed{reach.begin, target.size() > 0 ? std::max(reach.end, target.end) : reach.end};
    if (computed.size() - reach.size() >= p.stride[d])
      throw std::logic_error("fused planner: a computed dx region does not match its dy rows");
    t.dy.push_back(dy);
    t.computed.push_back(computed);
    t.target.push_back(target);
    t.carried.push_back(std::max<int64_t>(0, std::min(computed.end, p.in[d]) - boundary(s + 1)));
    t.dy_max = std::max(t.dy_max, dy.size());
    t.x_max = std::max(t.x_max, computed.size());
    t.x_sum += computed.size();
    t.carry_max = std::max(t.carry_max, t.carried.back());
  }
  return t;
}

// The kept outputs and carries (FusedBackwardLayout) of a tiling; with a pooling folded in, the
// dy tile (dy_rows elements per n and k) and pool_backward's output (y_rows) after the carries.
FusedBackwardLayout layout_of(const ConvProblem& p, int64_t tn, int64_t tc, int split_dim, int64_t carry_rows,
                              int64_t dy_rows = 0, int64_t y_rows = 0) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const double kept_es = static_cast<double>(dtype_size(kKeptDtype));
  const int64_t kernel = p.kernel[0] * p.kernel[1] * p.kernel[2];
  int64_t other = 1;  // the carry's extent along the spatial dims that are whole
  for (int d = 0; d < kMaxSpatial; ++d)
    if (d != split_dim) other *= p.in[d];
  FusedBackwardLayout l;
  l.split_dim = split_dim;
  for (int64_t c = 0; c < p.c; c += tc) {
    const int64_t c_tile = std::min(tc, p.c - c);
    l.dw_offset.push_back(l.kept_bytes);
    l.kept_bytes += slot_bytes(p.k * c_tile * kernel, kept_es);
    l.carry_offset.push_back(l.scratch_bytes);
    if (carry_rows > 0) l.scratch_bytes += slot_bytes(tn * c_tile * carry_rows * other, es);
  }
  l.db_offset = l.kept_bytes;
  l.kept_bytes += slot_bytes(p.k, kept_es);
  l.dy_offset = l.scratch_bytes;
  l.scratch_bytes += slot_bytes(tn * p.k * dy_rows, es);
  l.pooled_dy_offset = l.scratch_bytes;
  l.scratch_bytes += slot_bytes(tn * p.k * y_rows, es);
  return l;
}

struct Candidate {
  std::array<const DimTiles*, kMaxSpatial> dims{};
  const DimTiles* split = nullptr;  // dims[split_dim], the one split dimension (null: none)
  int split_dim = -1;
  int64_t tn = 1, tc = 1, tiles_n = 1, tiles_c = 1;
  int buffers = 3, dy_slots = 1, x_slots = 1, w_slots = 1, dx_slots = 1;
  int64_t w_loads = 1;
  size_t dy_slot = 0, pooled_slot = 0, x_slot = 0, w_slot = 0, workspace = 0, peak = 0;
  FusedBackwardLayout layout;
  double bytes_h2d = 0, bytes_d2h = 0;
};

std::vector<Chunk> expand_chunks(const ConvProblem& p, const Candidate& c) {
  const std::array<const DimTiles*, kMaxSpatial>& dims = c.dims;
  std::vector<Chunk> chunks;
  const int64_t tiles_s = c.split ? c.split->tiles : 1;
  for (int64_t nt = 0; nt < c.tiles_n; ++nt)
    for (int64_t s = 0; s < tiles_s; ++s)
      for (int64_t ct = 0; ct < c.tiles_c; ++ct) {
        Chunk ch;
        ch.n = Range{nt * c.tn, std::min((nt + 1) * c.tn, p.n)};
        ch.c = Range{ct * c.tc, std::min((ct + 1) * c.tc, p.c)};
        ch.k = Range{0, p.k};
        for (int d = 0; d < kMaxSpatial; ++d) {
          const int64_t i = d == c.split_dim ? s : 0;
          ch.out[d] = ch.out_read[d] = dims[d]->dy[i];
          ch.in[d] = dims[d]->computed[i];
          ch.target[d] = dims[d]->target[i];
          ch.compute_padding[d] = d == c.split_dim ? 0 : p.padding[d];
        }
        ch.load_y = ct == 0;  // a new dy tile: it serves every c-tile before the next one loads
        ch.load_x = true;
        ch.load_w = chunks.empty() || c.tiles_c > 1;
        ch.first_c = ch.last_c = true;  // dx reduces over K, which is whole
        chunks.push_back(ch);
      }
  return chunks;
}

// The tiles of each spatial dimension: whole, or (unless the pooling pads it) split.
struct SpatialOptions {
  std::array<DimTiles, kMaxSpatial> whole;
  std::array<std::vector<DimTiles>, kMaxSpatial> splits;
};

SpatialOptions spatial_options(const ConvProblem& p, const ConvProblem* pool) {
  SpatialOptions o;
  for (int d = 0; d < kMaxSpatial; ++d) {
    o.whole[d] = whole_dim(p, d);
    add_pooled_rows(o.whole[d], pool, d);
    if (pool && pool->padding[d] != 0) continue;  // cuDNN pads the pooling's border only in a whole dim
    for (int64_t t : candidate_tiles(p.out[d]))
      if (ceil_div(p.out[d], t) > 1 && tiles_within_limit(ceil_div(p.out[d], t))) {
        o.splits[d].push_back(split_dim(p, d, t));
        add_pooled_rows(o.splits[d].back(), pool, d);
      }
  }
  return o;
}

// Every n and c tiling at every pipeline depth, with no spatial split or one spatial dimension
// split (see fused_planner.hpp); of equally fast ones the search keeps the first.
void offer_candidates(const ConvProblem& p, const PlannerConfig& config, int y_inputs, const ConvProblem* pool,
                      const SpatialOptions& spatial, CandidateSearch<Candidate>& search) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const int64_t kernel = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const std::array<int64_t, 5> dy_extent{p.n, p.k, p.out[0], p.out[1], p.out[2]};
  const std::array<int64_t, 5> x_extent{p.n, p.c, p.in[0], p.in[1], p.in[2]};
  const std::array<int64_t, 5> w_extent{p.k, p.c, p.kernel[0], p.kernel[1], p.kernel[2]};

  Candidate c;
  auto consider = [&]() {
    const std::array<const DimTiles*, kMaxSpatial>& dims = c.dims;
    const int64_t tiles_s = c.split ? c.split->tiles : 1;
    // Per n and k: the rows of a tile's y-shaped inputs (dy, or y over the pooling windows) and of
    // its pooled ones (dq, q), the most and all tiles together.
    int64_t dy_rows = 1, x_rows = 1, x_moved = 1, y_rows = 1, y_moved = 1, pooled_rows = 1, pooled_moved = 1;
    for (int d = 0; d < kMaxSpatial; ++d) {
      dy_rows *= dims[d]->dy_max;
      x_rows *= dims[d]->x_max;
      x_moved *= dims[d]->x_sum;
      y_rows *= dims[d]->y_max;
      y_moved *= dims[d]->y_sum;
      pooled_rows *= dims[d]->pooled_max;
      pooled_moved *= dims[d]->pooled_sum;
    }
    const int pooled_inputs = pool ? 2 : 0;
    for (int64_t tn : candidate_tiles(p.n))
      for (int64_t tc : candidate_tiles(p.c)) {
        c.tn = tn, c.tc = tc;
        c.tiles_n = ceil_div(p.n, tn), c.tiles_c = ceil_div(p.c, tc);
        const double chunks = static_cast<double>(c.tiles_n) * static_cast<double>(tiles_s) * c.tiles_c;
        const int64_t dy_elems = tn * p.k * dy_rows, x_elems = tn * tc * x_rows, w_elems = p.k * tc * kernel;
        const int64_t largest = std::max({dy_elems, x_elems, w_elems, tn * p.k * y_rows});
        if (!search.within_limits(largest, chunks)) continue;
        c.dy_slot = slot_bytes(tn * p.k * y_rows, es);  // dy, or y over the pooling windows
        c.pooled_slot = slot_bytes(tn * p.k * pooled_rows, es);
        c.x_slot = slot_bytes(x_elems, es);
        c.w_slot = slot_bytes(w_elems, es);
        c.layout = layout_of(p, tn, tc, c.split_dim, c.split ? c.split->carry_max : 0, pool ? dy_rows : 0,
                             pool ? y_rows : 0);
        // A half call's dw is summed in float32 (kKeptDtype): the cuda backend computes each chunk's
        // partial dw in half into the workspace's tail first (as backward_planner.cpp reserves it).
        c.workspace = config.workspace_bytes + (p.dtype != kKeptDtype ? c.w_slot : 0);
        const int64_t dy_loads = c.tiles_n * tiles_s, total = static_cast<int64_t>(chunks);
        c.w_loads = c.tiles_c == 1 ? 1 : total;
        // dy (and y, ...) once; x once per chunk (halo rows included); w once, or once per chunk when C
        // is split.
        c.bytes_h2d = static_cast<double>(p.n * p.k) * (y_inputs * y_moved + pooled_inputs * pooled_moved) * es +
                      static_cast<double>(p.n * p.c * x_moved) * es +
                      static_cast<double>(p.w_elements()) * es * static_cast<double>(c.w_loads == 1 ? 1 : dy_loads);
        c.bytes_d2h = static_cast<double>(p.x_elements()) * es +
                      static_cast<double>(p.w_elements() + p.k) * static_cast<double>(dtype_size(kKeptDtype));
        const double flops = 4.0 * static_cast<double>(p.y_elements()) * static_cast<double>(p.c * kernel) +
                             static_cast<double>(p.y_elements());
        TrafficEstimate t = traffic_estimate(c.bytes_h2d, c.bytes_d2h, flops, chunks);
        t.reduction_depth = static_cast<double>(p.k * kernel);
        t.output_channels = static_cast<double>(tc);
        t.copy_run_bytes = shortest_run_bytes(
            es, {CopyRegion{{tn, p.k, dims[0]->dy_max, dims[1]->dy_max, dims[2]->dy_max}, dy_extent},
                 CopyRegion{{tn, tc, dims[0]->x_max, dims[1]->x_max, dims[2]->x_max}, x_extent},
                 CopyRegion{{p.k, tc, p.kernel[0], p.kernel[1], p.kernel[2]}, w_extent}});
        t.first_load_bytes = static_cast<double>(y_inputs * c.dy_slot + pooled_inputs * c.pooled_slot + c.x_slot +
                                                 c.w_slot);
        t.last_store_bytes = static_cast<double>(c.x_slot + c.layout.kept_bytes);
        for (int buffers : {3, 2, 1}) {
          c.buffers = buffers;
          c.dy_slots = static_cast<int>(std::min<int64_t>(buffers, dy_loads));
          c.x_slots = c.dx_slots = static_cast<int>(std::min<int64_t>(buffers, total));
          c.w_slots = static_cast<int>(std::min<int64_t>(buffers, c.w_loads));
          c.peak = c.dy_slots * (y_inputs * c.dy_slot + pooled_inputs * c.pooled_slot) + c.x_slots * c.x_slot +
                   c.dx_slots * c.x_slot +
                   c.w_slots * c.w_slot + c.layout.kept_bytes + c.layout.scratch_bytes + c.workspace;
          search.offer(c, {c.peak, largest, chunks}, [&] {
            TrafficEstimate at_depth = t;
            at_depth.buffers = buffers;
            return predict_seconds(at_depth, config.machine);
          });
        }
      }
  };
  c.dims = {&spatial.whole[0], &spatial.whole[1], &spatial.whole[2]};
  c.split = nullptr;
  c.split_dim = -1;
  consider();
  for (int d = 0; d < p.spatial_dims; ++d)
    for (const DimTiles& t : spatial.splits[d]) {
      c.dims = {&spatial.whole[0], &spatial.whole[1], &spatial.whole[2]};
      c.dims[d] = &t;
      c.split = &t;
      c.split_dim = d;
      consider();
    }
}

// Records the layout in the plan's slot table, each piece with its bytes (the next piece's offset,
// or the end of its block, minus its own): dw per c-tile and db kept; per c-tile its carried dx
// rows (zero bytes when nothing is carried), then dz and pool_backward's dy (pooling folded in).
void record_layout(Plan& plan, const FusedBackwardLayout& l) {
  const size_t tiles = l.dw_offset.size();
  for (size_t j = 0; j < tiles; ++j) {
    const size_t end = j + 1 < tiles ? l.dw_offset[j + 1] : l.db_offset;
    add_block_slot(plan, SlotKind::kept, "dw[" + std::to_string(j) + "]", l.dw_offset[j], end - l.dw_offset[j]);
  }
  add_block_slot(plan, SlotKind::kept, "db", l.db_offset, l.kept_bytes - l.db_offset);
  for (size_t j = 0; j < tiles; ++j) {
    const size_t end = j + 1 < tiles ? l.carry_offset[j + 1] : l.dy_offset;
    add_block_slot(plan, SlotKind::scratch, "carried dx[" + std::to_string(j) + "]", l.carry_offset[j],
                   end - l.carry_offset[j]);
  }
  add_block_slot(plan, SlotKind::scratch, "dz", l.dy_offset, l.pooled_dy_offset - l.dy_offset);
  add_block_slot(plan, SlotKind::scratch, "pooled dy", l.pooled_dy_offset, l.scratch_bytes - l.pooled_dy_offset);
}

Plan plan_of(const ConvProblem& p, const PlannerConfig& config, int y_inputs, const std::string& fused,
             const ConvProblem* pool, const Candidate& best, double seconds) {
  Plan plan = plan_with_totals(p, config, best.workspace, best.peak, best.bytes_h2d, best.bytes_d2h, seconds);
  plan.fused = fused;
  plan.y_inputs = y_inputs;
  plan.pooled_inputs = pool ? 2 : 0;
  plan.pooled_slot_bytes = pool ? best.pooled_slot : 0;
  plan.tiling = Tiling{best.tn, p.k, best.tc, {best.dims[0]->tile, best.dims[1]->tile, best.dims[2]->tile}};
  plan.splits_n = best.tiles_n;
  plan.splits_c = best.tiles_c;
  for (int d = 0; d < kMaxSpatial; ++d) plan.splits_out[d] = best.dims[d]->tiles;
  plan.order = LoopOrder::ns_outer;
  plan.buffers = best.buffers;
  set_x_w_slots(plan, best.x_slots, best.x_slot, best.w_slots, best.w_slot, best.w_loads == 1);
  plan.y_buffers = best.dy_slots;
  plan.y_slot_bytes = best.dy_slot;
  plan.bias_buffers = 0;
  plan.out_buffers = best.dx_slots;
  plan.out_slot_bytes = best.x_slot;
  plan.kept_bytes = best.layout.kept_bytes;
  plan.scratch_bytes = best.layout.scratch_bytes;
  record_layout(plan, best.layout);
  plan.chunks = expand_chunks(p, best);
  return plan;
}

Plan plan_with_workspace(const ConvProblem& p, const PlannerConfig& config, int y_inputs, const std::string& fused,
                         const ConvProblem* pool) {
  const SpatialOptions spatial = spatial_options(p, pool);
  return search_plan<Candidate>(
      config.memory_limit, [&](auto& search) { offer_candidates(p, config, y_inputs, pool, spatial, search); },
      [&](const Candidate& best, double seconds) { return plan_of(p, config, y_inputs, fused, pool, best, seconds); },
      [&](size_t need) { throw_out_of_budget(p, config.memory_limit, need, config.workspace_bytes != 0); });
}

}  // namespace

Plan plan_conv_backward_data_filter_bias_for(const ConvProblem& p, const PlannerConfig& config, int y_inputs,
                                             const std::string& fused, const ConvProblem* pool) {
  if (p.op != Operation::backward_data) throw std::logic_error("fused backward planner: not a backward-data problem");
  require_ungrouped(p, fused.c_str(), "conv_backward_data, conv_backward_filter and conv_backward_bias");
  require_symmetric_padding(p, fused.c_str());
  return with_grown_workspace(
      with_workspace_fallback(
          config, [&](const PlannerConfig& c) { return plan_with_workspace(p, c, y_inputs, fused, pool); }),
      config);
}

PooledRows pooled_rows(const ConvProblem& pool, int d, Range dy, bool whole) {
  if (whole) return {Range{0, pool.out[d]}, Range{0, pool.in[d]}, pool.padding[d]};
  const Range pooled = conv_output_range_reading(dy, pool.out[d], pool.kernel[d], pool.stride[d], 0, 1);
  if (pooled.size() == 0) return {Range{0, 0}, Range{dy.begin, dy.begin}, 0};  // no window reaches dy
  return {pooled, conv_input_range(pooled, pool.kernel[d], pool.stride[d], 0, 1), 0};
}

FusedBackwardLayout recorded_layout(const Plan& plan) {
  FusedBackwardLayout l;
  for (int d = 0; d < kMaxSpatial; ++d)
    if (plan.splits_out[d] > 1) l.split_dim = d;
  for (const SlotPlan& s : plan.slots) {
    if (s.name.rfind("dw[", 0) == 0) l.dw_offset.push_back(s.offset);
    if (s.name.rfind("carried dx[", 0) == 0) l.carry_offset.push_back(s.offset);
  }
  if (l.dw_offset.empty() || l.dw_offset.size() != l.carry_offset.size())
    throw std::logic_error("fused backward: the plan records no layout of its kept and carried memory");
  l.db_offset = plan.slot("db").offset;
  l.kept_bytes = plan.kept_bytes;
  l.scratch_bytes = plan.scratch_bytes;
  for (const SlotPlan& s : plan.slots) {
    if (s.name == "dz") l.dy_offset = s.offset;
    if (s.name == "pooled dy") l.pooled_dy_offset = s.offset;
  }
  return l;
}

}  // namespace ooc
