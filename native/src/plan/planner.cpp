#include "plan/planner.hpp"

#include <algorithm>
#include <stdexcept>

#include "plan/candidate_search.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/cost_model.hpp"
#include "plan/layout_copies.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {
namespace {

using namespace planner_parts;  // NOLINT: the shared planner pieces

// What one spatial dimension contributes for a given output tile size.
struct SpatialSplit {
  int64_t tile = 1, tiles = 1;
  int64_t max_in = 1;  // largest input region (halo included)
  int64_t sum_in = 1;  // input elements read along this dim over all tiles
};

SpatialSplit spatial_split(const ConvProblem& p, int d, int64_t tile) {
  SpatialSplit s;
  s.tile = tile;
  s.tiles = ceil_div(p.out[d], tile);
  if (s.tiles == 1 && p.cudnn_can_pad(d)) {  // whole dimension: cuDNN pads it itself, no zeros cross the link
    s.max_in = s.sum_in = p.in[d];
    return s;
  }
  s.max_in = 0;
  s.sum_in = 0;
  for (int64_t t = 0; t < s.tiles; ++t) {
    const Range out{t * tile, std::min((t + 1) * tile, p.out[d])};
    const int64_t extent = conv_input_range(out, p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]).size();
    s.max_in = std::max(s.max_in, extent);
    s.sum_in += extent;
  }
  return s;
}

// tiles_k and tiles_c count the k and c tiles inside one group tile (conv_geometry.hpp's
// GroupedChannels); ungrouped, tiles_g is 1 and they tile K and C.
struct Candidate {
  Tiling tiling;
  int64_t tiles_g = 1, tiles_n = 1, tiles_k = 1, tiles_c = 1;
  Dims3 tiles_out{1, 1, 1};
  LoopOrder order = LoopOrder::ns_outer;
  int buffers = 3, x_buffers = 3, w_buffers = 3;
  int64_t w_loads = 0;
  size_t x_slot = 0, w_slot = 0, y_slot = 0, peak = 0;
  size_t copy_bytes = 0;  // workspace for the chunk's copies in the other layout (plan/layout_copies.hpp)
  double bytes_h2d = 0, bytes_d2h = 0;
};

// Loads of x and w over the whole loop nest: a chunk reuses the tensor region of the chunk before
// it when they are equal (see LoopOrder). Must agree with expand_chunks (a planner test checks).
// The k loop walks group tiles and the k tiles inside each (k_tiles in all); a group tile reads
// only its groups' x channels, so x is re-read per k tile inside a group tile, not per k_tiles.
void count_traffic(const ConvProblem& p, Candidate& c, double x_once, double w_total, double y_total) {
  const int64_t tiles_ns = c.tiles_n * c.tiles_out[0] * c.tiles_out[1] * c.tiles_out[2];
  const int64_t k_tiles = c.tiles_g * c.tiles_k;
  double x_loads_factor, w_loads_factor;  // multiples of x_once and w_total
  int64_t x_loads, w_loads;
  const int64_t total_chunks = tiles_ns * k_tiles * c.tiles_c;
  if (c.order == LoopOrder::k_outer) {
    const bool x_reused = tiles_ns == 1 && c.tiles_c == 1;
    x_loads_factor = x_reused ? 1.0 : static_cast<double>(c.tiles_k);
    x_loads = x_reused ? c.tiles_g : total_chunks;
    const bool w_reused = c.tiles_c == 1;
    w_loads_factor = w_reused ? 1.0 : static_cast<double>(tiles_ns);
    w_loads = w_reused ? k_tiles : total_chunks;
  } else {
    const bool x_reused = c.tiles_c == 1;
    x_loads_factor = x_reused ? 1.0 : static_cast<double>(c.tiles_k);
    x_loads = x_reused ? tiles_ns * c.tiles_g : total_chunks;
    const bool w_reused = k_tiles == 1 && c.tiles_c == 1;
    w_loads_factor = w_reused ? 1.0 : static_cast<double>(tiles_ns);
    w_loads = w_reused ? 1 : total_chunks;
  }
  // No slot the plan can never fill: a tensor loaded L times needs at most L slots.
  c.x_buffers = static_cast<int>(std::min<int64_t>(c.buffers, x_loads));
  c.w_buffers = static_cast<int>(std::min<int64_t>(c.buffers, w_loads));
  c.w_loads = w_loads;
  c.bytes_h2d = x_once * x_loads_factor + w_total * w_loads_factor + (p.beta != 0.0 ? y_total : 0.0) +
                (p.has_bias ? static_cast<double>(p.k) * static_cast<double>(dtype_size(p.dtype)) : 0.0);
  c.bytes_d2h = y_total;
}

std::vector<Chunk> expand_chunks(const ConvProblem& p, const Candidate& c) {
  std::vector<Chunk> chunks;
  auto range = [](int64_t t, int64_t tile, int64_t extent) { return Range{t * tile, std::min((t + 1) * tile, extent)}; };
  const int64_t tiles_ns = c.tiles_n * c.tiles_out[0] * c.tiles_out[1] * c.tiles_out[2];
  const int64_t k_tiles = c.tiles_g * c.tiles_k;  // group tiles outside, k tiles inside each
  const int64_t outer = c.order == LoopOrder::k_outer ? k_tiles : tiles_ns;
  const int64_t middle = c.order == LoopOrder::k_outer ? tiles_ns : k_tiles;
  const GroupedChannels k_of{p.k / p.groups}, c_of{p.c / p.groups};
  const bool several_groups = c.tiling.g > 1;  // a tile of several groups holds their channels whole
  auto within = [&](int64_t t, int64_t tile, int64_t per_group) {
    return several_groups ? Range{0, per_group} : range(t, tile, per_group);
  };
  chunks.reserve(static_cast<size_t>(outer * middle * c.tiles_c));
  const Chunk* prev = nullptr;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t m = 0; m < middle; ++m) {
      const int64_t kt = c.order == LoopOrder::k_outer ? o : m;
      int64_t ns = c.order == LoopOrder::k_outer ? m : o;
      // ns enumerates (n, d0, d1, d2) tiles, last fastest.
      Dims3 st;
      for (int d = kMaxSpatial - 1; d >= 0; --d) {
        st[d] = ns % c.tiles_out[d];
        ns /= c.tiles_out[d];
      }
      const int64_t nt = ns;
      const Range groups = range(kt / c.tiles_k, c.tiling.g, p.groups);
      for (int64_t ct = 0; ct < c.tiles_c; ++ct) {
        Chunk ch;
        ch.n = range(nt, c.tiling.n, p.n);
        ch.k = k_of.channels(groups, within(kt % c.tiles_k, c.tiling.k, k_of.per_group));
        ch.c = c_of.channels(groups, within(ct, c.tiling.c, c_of.per_group));
        for (int d = 0; d < kMaxSpatial; ++d) {
          ch.out[d] = range(st[d], c.tiling.out[d], p.out[d]);
          if (c.tiles_out[d] == 1 && p.cudnn_can_pad(d)) {  // cuDNN pads it
            ch.in[d] = Range{0, p.in[d]};
            ch.compute_padding[d] = p.padding[d];
          } else {
            ch.in[d] = conv_input_range(ch.out[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]);
            ch.compute_padding[d] = 0;
          }
        }
        ch.first_c = ct == 0;
        ch.last_c = ct == c.tiles_c - 1;
        if (prev) {
          ch.load_x = !(prev->n == ch.n && prev->c == ch.c && prev->in == ch.in);
          ch.load_w = !(prev->k == ch.k && prev->c == ch.c);
        }
        chunks.push_back(ch);
        prev = &chunks.back();
      }
    }
  }
  return chunks;
}

// The (g, k, c) tilings of a convolution's channels: tiles of several groups with their channels
// whole, and tiles of one group with its k and c tiled (conv_geometry.hpp's GroupedChannels). In
// channels per tile; ungrouped, every (k, c) tiling of K and C.
struct ChannelTiling {
  int64_t g, k, c;
};
// A half-precision call keeps its reduction over C inside each chunk: accumulating y across
// chunks would round the partial sums to half at every chunk.
std::vector<ChannelTiling> channel_tilings(const ConvProblem& p) {
  const int64_t k_per_group = p.k / p.groups, c_per_group = p.c / p.groups;
  const std::vector<int64_t> c_tiles =
      p.dtype == DType::float32 ? candidate_tiles(c_per_group) : std::vector<int64_t>{c_per_group};
  std::vector<ChannelTiling> tilings;
  for (int64_t tg : candidate_tiles(p.groups)) {
    if (tg > 1) {
      tilings.push_back({tg, tg * k_per_group, tg * c_per_group});
      continue;
    }
    for (int64_t tk : candidate_tiles(k_per_group))
      for (int64_t tc : c_tiles) tilings.push_back({1, tk, tc});
  }
  return tilings;
}

// Every tiling of the channels (channel_tilings), n and the output's spatial dims (each from whole
// down), in both loop orders, at every pipeline depth; of equally fast ones the search keeps the
// first.
void offer_candidates(const ConvProblem& p, const PlannerConfig& config, CandidateSearch<Candidate>& search) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const int64_t kernel_elems = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const double w_total = static_cast<double>(p.w_elements()) * es;
  const double y_total = static_cast<double>(p.y_elements()) * es;
  const size_t bias_bytes = bias_slot(p);
  const bool cuda = config.backend == "cuda";
  const bool copies = layout_copies(cuda, p.op, p.layout, p.spatial_dims, p.dtype) != LayoutCopies::none;
  const std::array<int64_t, 5> x_extent{p.n, p.c, p.in[0], p.in[1], p.in[2]};
  const std::array<int64_t, 5> y_extent{p.n, p.k, p.out[0], p.out[1], p.out[2]};

  std::array<std::vector<SpatialSplit>, kMaxSpatial> spatial;
  for (int d = 0; d < kMaxSpatial; ++d)
    for (int64_t t : candidate_tiles(p.out[d]))
      if (tiles_within_limit(ceil_div(p.out[d], t))) spatial[d].push_back(spatial_split(p, d, t));

  const int64_t k_per_group = p.k / p.groups, c_per_group = p.c / p.groups;
  for (const ChannelTiling& channels : channel_tilings(p)) {
      const int64_t tg = channels.g, tk = channels.k, tc = channels.c;
      const int64_t w_elems = tk * std::min(tc, c_per_group) * kernel_elems;
      const int64_t tiles_g = ceil_div(p.groups, tg);
      const int64_t tiles_k = tg > 1 ? 1 : ceil_div(k_per_group, tk);
      const int64_t tiles_c = tg > 1 ? 1 : ceil_div(c_per_group, tc);
      for (int64_t tn : candidate_tiles(p.n))
        for (const SpatialSplit& s0 : spatial[0])
          for (const SpatialSplit& s1 : spatial[1])
            for (const SpatialSplit& s2 : spatial[2]) {
              const int64_t x_elems = tn * tc * s0.max_in * s1.max_in * s2.max_in;
              const int64_t y_elems = tn * tk * s0.tile * s1.tile * s2.tile;
              Candidate c;
              c.tiling = Tiling{tn, tk, tc, {s0.tile, s1.tile, s2.tile}, tg};
              c.tiles_g = tiles_g;
              c.tiles_n = ceil_div(p.n, tn);
              c.tiles_k = tiles_k;
              c.tiles_c = tiles_c;
              c.tiles_out = {s0.tiles, s1.tiles, s2.tiles};
              const double chunks = static_cast<double>(c.tiles_n) * tiles_g * c.tiles_k * c.tiles_c * s0.tiles *
                                    s1.tiles * s2.tiles;
              const int64_t largest = std::max({x_elems, w_elems, y_elems});
              if (!search.within_limits(largest, chunks)) continue;
              c.x_slot = slot_bytes(x_elems, es);
              c.w_slot = slot_bytes(w_elems, es);
              c.y_slot = slot_bytes(y_elems, es);
              c.copy_bytes = copies ? layout_copy_bytes(x_elems, w_elems, y_elems, p.dtype) : 0;
              const double x_once = static_cast<double>(p.n) * p.c * s0.sum_in * s1.sum_in * s2.sum_in * es;
              for (LoopOrder order : {LoopOrder::ns_outer, LoopOrder::k_outer})
                for (int buffers : {3, 2, 1}) {
                  // y has one slot per buffer: more buffers than output tiles would sit idle.
                  if (buffers > 1 && buffers > c.tiles_n * tiles_g * c.tiles_k * s0.tiles * s1.tiles * s2.tiles)
                    continue;
                  c.order = order;
                  c.buffers = buffers;
                  count_traffic(p, c, x_once, w_total, y_total);
                  c.peak = c.x_buffers * c.x_slot + c.w_buffers * c.w_slot + c.buffers * c.y_slot + bias_bytes +
                           config.workspace_bytes + c.copy_bytes;
                  search.offer(c, {c.peak, largest, chunks}, [&] {
                    TrafficEstimate t = traffic_estimate(c.bytes_h2d, c.bytes_d2h, p.flops(), chunks);
                    t.reduction_depth = static_cast<double>(std::min(tc, c_per_group) * kernel_elems);
                    // On the GPU every output channel of the chunk, all its groups'
                    // (cost_model.hpp's kHalfRateGroupedChannels says why); the host backend's
                    // loops run group by group.
                    t.grouped = cuda && p.groups > 1;
                    t.output_channels = static_cast<double>(t.grouped ? tk : std::min(tk, k_per_group));
                    t.copy_run_bytes =
                        shortest_run_bytes(es, {CopyRegion{{tn, tc, s0.max_in, s1.max_in, s2.max_in}, x_extent},
                                                CopyRegion{{tn, tk, s0.tile, s1.tile, s2.tile}, y_extent}});
                    t.first_load_bytes = static_cast<double>(c.x_slot + c.w_slot);
                    t.last_store_bytes = static_cast<double>(c.y_slot);
                    t.buffers = buffers;
                    return predict_seconds(t, config.machine);
                  });
                }
            }
    }
}

Plan plan_of(const ConvProblem& p, const PlannerConfig& config, const Candidate& best, double seconds) {
  Plan plan = plan_with_totals(p, config, config.workspace_bytes + best.copy_bytes, best.peak, best.bytes_h2d,
                               best.bytes_d2h, seconds);
  plan.tiling = best.tiling;
  plan.splits_g = best.tiles_g;
  plan.splits_n = best.tiles_n;
  plan.splits_k = best.tiles_k;
  plan.splits_c = best.tiles_c;
  plan.splits_out = best.tiles_out;
  plan.order = best.order;
  plan.buffers = best.buffers;
  plan.y_buffers = best.buffers;
  plan.bias_buffers = p.has_bias ? 1 : 0;
  // x's slot count follows from how often it loads; keep the plan's own count consistent with it.
  set_x_w_slots(plan, best.x_buffers, best.x_slot, best.w_buffers, best.w_slot, best.w_loads == 1);
  plan.y_slot_bytes = best.y_slot;
  plan.bias_bytes = bias_slot(p);
  plan.chunks = expand_chunks(p, best);
  return plan;
}

Plan plan_with_workspace(const ConvProblem& p, const PlannerConfig& config) {
  return search_plan<Candidate>(
      config.memory_limit, [&](auto& search) { offer_candidates(p, config, search); },
      [&](const Candidate& best, double seconds) { return plan_of(p, config, best, seconds); },
      [&](size_t need) {
        throw_out_of_budget(p, config.memory_limit, need, config.workspace_bytes != 0);
      });
}

}  // namespace

const char* loop_order_name(LoopOrder order) {
  switch (order) {
    case LoopOrder::k_outer: return "k_outer";
    case LoopOrder::ns_outer: return "ns_outer";
    case LoopOrder::c_outer: return "c_outer";
  }
  return "?";
}

Plan plan_conv_forward_for(const ConvProblem& p, const PlannerConfig& config) {
  if (p.op != Operation::forward) throw std::logic_error("plan_conv_forward_for: not a forward problem");
  return with_grown_workspace(
      with_workspace_fallback(config, [&](const PlannerConfig& c) { return plan_with_workspace(p, c); }),
      config);
}

}  // namespace ooc
