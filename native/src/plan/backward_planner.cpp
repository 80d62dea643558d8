// The planner of the three gradients. Each is a loop nest over tiles of six dimensions (n, k, c
// and three spatial ones) with its reduction innermost, so that an output tile accumulates on the
// device from consecutive chunks:
//   backward data    dx[n, c, target]  reduces over k;           reads dy[n, k, dy rows], w[k, c]
//   backward filter  dw[k, c]          reduces over n and out;   reads x[n, c, halo'd slab], dy[n, k, out]
//   backward bias    db[k]             reduces over n and out;   reads dy[n, k, out]
// The nests differ only in which tensors depend on which dimensions and in the spatial regions,
// so one engine enumerates them: tile sizes per dimension, loop order, pipeline depth; what each
// tensor costs (slots, loads, bytes) follows from its dimensions and the nest. A grouped
// convolution adds a seventh dimension, g (group tiles), and k and c then tile the channels inside
// a group tile (conv_geometry.hpp's GroupedChannels); ungrouped, g has one tile.
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

#include "plan/candidate_search.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/cost_model.hpp"
#include "plan/layout_copies.hpp"
#include "plan/planner.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {
namespace {

using namespace planner_parts;  // NOLINT: the shared planner pieces

enum LoopDim { kN, kG, kK, kC, kS0, kS1, kS2, kLoopDims };
constexpr uint32_t bit(int d) { return 1u << d; }
constexpr uint32_t kSpatialDims = bit(kS0) | bit(kS1) | bit(kS2);

// Tensor families (plan.hpp): regions indexed like x, w, y or bias.
enum Family { kX, kW, kY, kB };

// One candidate tiling of one loop dimension. Along a spatial dimension the x- and y-shaped
// regions of a tile differ (halos, dy rows): `max` sizes the slot, `sum` is the extent moved over
// all tiles (staged loads move whole regions, zeros included).
struct DimTiling {
  int64_t tile = 1, tiles = 1;
  int64_t x_max = 1, x_sum = 1, y_max = 1, y_sum = 1;
};

// A tensor of the nest: its family, the loop dims it is indexed by, and elements per index that no
// loop tiles (the kernel of w).
struct TensorRole {
  Family family;
  uint32_t dims;
  int64_t fixed = 1;
};

struct Nest {
  std::array<int64_t, kLoopDims> extent{};
  std::array<std::vector<DimTiling>, kLoopDims> tilings;
  std::vector<TensorRole> inputs;
  TensorRole output;
  uint32_t reduction = 0;  // dims the output accumulates over (innermost in every order)
  std::vector<std::pair<LoopOrder, std::array<int, kLoopDims>>> orders;
};

using Choice = std::array<const DimTiling*, kLoopDims>;

int64_t max_extent(const Choice& ch, int d, Family f) {
  if (!(bit(d) & kSpatialDims)) return ch[d]->tile;
  return f == kX ? ch[d]->x_max : ch[d]->y_max;
}

int64_t sum_extent(const Nest& nest, const Choice& ch, int d, Family f) {
  if (!(bit(d) & kSpatialDims)) return nest.extent[d];
  return f == kX ? ch[d]->x_sum : ch[d]->y_sum;
}

int64_t slot_elements(const TensorRole& t, const Choice& ch) {
  int64_t e = t.fixed;
  for (int d = 0; d < kLoopDims; ++d)
    if (t.dims & bit(d)) e *= max_extent(ch, d, t.family);
  return e;
}

// Elements moved when every tile region of the tensor is loaded once.
double once_elements(const Nest& nest, const TensorRole& t, const Choice& ch) {
  double e = static_cast<double>(t.fixed);
  for (int d = 0; d < kLoopDims; ++d)
    if (t.dims & bit(d)) e *= static_cast<double>(sum_extent(nest, ch, d, t.family));
  return e;
}

// How often an input is loaded in the nest, and how many times over its tiles are: a chunk reloads
// it when an index it depends on changed, i.e. at every step of the loops down to the innermost
// non-trivial one it depends on; loops it does not depend on above that one repeat its tiles.
struct Loads {
  int64_t count = 1;
  double repeat = 1;
};
Loads loads_of(const TensorRole& t, const Choice& ch, const std::array<int, kLoopDims>& order) {
  int inner = -1;
  for (int i = 0; i < kLoopDims; ++i)
    if ((t.dims & bit(order[i])) && ch[order[i]]->tiles > 1) inner = i;
  Loads l;
  for (int i = 0; i <= inner; ++i) {
    l.count *= ch[order[i]]->tiles;
    if (!(t.dims & bit(order[i]))) l.repeat *= static_cast<double>(ch[order[i]]->tiles);
  }
  return l;
}

int64_t output_tiles(const Nest& nest, const Choice& ch) {
  int64_t n = 1;
  for (int d = 0; d < kLoopDims; ++d)
    if (nest.output.dims & bit(d)) n *= ch[d]->tiles;
  return n;
}

// Tile sizes of a channel-like dimension: extent / 2^i, each tile region the tile itself.
std::vector<DimTiling> plain_tilings(int64_t extent) {
  std::vector<DimTiling> v;
  for (int64_t t : candidate_tiles(extent)) {
    DimTiling d;
    d.tile = t;
    d.tiles = ceil_div(extent, t);
    v.push_back(d);
  }
  return v;
}

// The spatial tilings of one dimension of `extent` rows: region(tile range) gives a tile's x and y
// regions (their sizes); `whole` the tiling of one tile, where cuDNN pads the dimension itself and
// no zeros cross the link, unless the padding is asymmetric (cudnn_pads false: cuDNN's is not).
template <typename RegionSizes>
std::vector<DimTiling> spatial_tilings(int64_t extent, DimTiling whole, bool cudnn_pads, RegionSizes region) {
  std::vector<DimTiling> v;
  for (int64_t t : candidate_tiles(extent)) {
    if (!tiles_within_limit(ceil_div(extent, t))) continue;  // no plan's: walking its tiles would not end
    DimTiling s = whole;
    s.tile = t;
    s.tiles = ceil_div(extent, t);
    if (s.tiles > 1 || !cudnn_pads) {
      s.x_max = s.x_sum = s.y_max = s.y_sum = 0;
      for (int64_t i = 0; i < s.tiles; ++i) {
        const auto [x, y] = region(Range{i * t, std::min((i + 1) * t, extent)});
        s.x_max = std::max(s.x_max, x);
        s.x_sum += x;
        s.y_max = std::max(s.y_max, y);
        s.y_sum += y;
      }
    }
    v.push_back(s);
  }
  return v;
}

// Backward filter and bias tile y / dy; each tile reads the x slab the forward would.
std::vector<DimTiling> out_tilings(const ConvProblem& p, int d) {
  const DimTiling whole{1, 1, p.in[d], p.in[d], p.out[d], p.out[d]};
  return spatial_tilings(p.out[d], whole, p.cudnn_can_pad(d), [&](Range out) {
    return std::pair(conv_input_range(out, p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]).size(), out.size());
  });
}

// Backward data tiles dx: per target the dx region computed (x; what a beta load moves) and the
// device's dy rows (y). The store moves the targets, i.e. dx once.
std::vector<DimTiling> dx_tilings(const ConvProblem& p, int d) {
  const DimTiling whole{1, 1, p.in[d], p.in[d], p.out[d], p.out[d]};
  return spatial_tilings(p.in[d], whole, p.cudnn_can_pad(d), [&](Range target) {
    const BackwardDataRows r =
        backward_data_rows(target, p.out[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]);
    return std::pair(r.computed.size(), r.dy_rows.size());
  });
}

constexpr std::array<int, kLoopDims> order_of(int a, int b, int c, int d, int e, int f, int g) {
  return {a, b, c, d, e, f, g};
}

Nest nest_of(const ConvProblem& p) {
  Nest nest;
  const int64_t kernel = p.kernel[0] * p.kernel[1] * p.kernel[2];
  nest.extent = {p.n, p.groups, p.k / p.groups, p.c / p.groups, 1, 1, 1};
  for (int d : {kN, kG, kK, kC}) nest.tilings[d] = plain_tilings(nest.extent[d]);
  // A half-precision backward data keeps its reduction over K inside each chunk (dx accumulated
  // across chunks would round to half at every chunk); dw and db accumulate in float32 instead
  // (ConvProblem::output_dtype).
  if (p.op == Operation::backward_data && p.dtype != DType::float32) nest.tilings[kK] = {DimTiling{nest.extent[kK], 1}};
  // Spatial tiles: of dx for backward data (its output), of dy for the others.
  for (int d = 0; d < kMaxSpatial; ++d) {
    const bool over_dx = p.op == Operation::backward_data;
    nest.extent[kS0 + d] = over_dx ? p.in[d] : p.out[d];
    nest.tilings[kS0 + d] = over_dx ? dx_tilings(p, d) : out_tilings(p, d);
  }
  switch (p.op) {
    case Operation::backward_data:
      nest.inputs = {{kY, bit(kN) | bit(kG) | bit(kK) | kSpatialDims}, {kW, bit(kG) | bit(kK) | bit(kC), kernel}};
      nest.output = {kX, bit(kN) | bit(kG) | bit(kC) | kSpatialDims};
      nest.reduction = bit(kK);
      nest.orders = {{LoopOrder::ns_outer, order_of(kN, kS0, kS1, kS2, kG, kC, kK)},
                     {LoopOrder::c_outer, order_of(kG, kC, kN, kS0, kS1, kS2, kK)}};
      break;
    case Operation::backward_filter:
      nest.inputs = {{kX, bit(kN) | bit(kG) | bit(kC) | kSpatialDims}, {kY, bit(kN) | bit(kG) | bit(kK) | kSpatialDims}};
      nest.output = {kW, bit(kG) | bit(kK) | bit(kC), kernel};
      nest.reduction = bit(kN) | kSpatialDims;
      nest.orders = {{LoopOrder::k_outer, order_of(kG, kK, kC, kN, kS0, kS1, kS2)},
                     {LoopOrder::c_outer, order_of(kG, kC, kK, kN, kS0, kS1, kS2)}};
      break;
    case Operation::backward_bias:
      nest.inputs = {{kY, bit(kN) | bit(kG) | bit(kK) | kSpatialDims}};
      nest.output = {kB, bit(kG) | bit(kK)};
      nest.reduction = bit(kN) | kSpatialDims;
      nest.orders = {{LoopOrder::k_outer, order_of(kG, kK, kC, kN, kS0, kS1, kS2)}};
      break;
    case Operation::forward:
      throw std::logic_error("plan_conv_backward_for: a forward problem");
    default:
      throw std::logic_error(std::string("plan_conv_backward_for: not a gradient: ") + operation_name(p.op));
  }
  return nest;
}

// A tensor's full extents and a region's, for the copy-run length (planner_parts::contiguous_run).
std::array<int64_t, 5> family_extent(const ConvProblem& p, Family f) {
  switch (f) {
    case kX: return {p.n, p.c, p.in[0], p.in[1], p.in[2]};
    case kW: return {p.k, p.c / p.groups, p.kernel[0], p.kernel[1], p.kernel[2]};
    case kY: return {p.n, p.k, p.out[0], p.out[1], p.out[2]};
    case kB: return {p.k, 1, 1, 1, 1};
  }
  return {};
}
std::array<int64_t, 5> region_extent(const ConvProblem& p, Family f, const Choice& ch) {
  switch (f) {
    case kX: return {ch[kN]->tile, ch[kG]->tile * ch[kC]->tile, ch[kS0]->x_max, ch[kS1]->x_max, ch[kS2]->x_max};
    case kW: return {ch[kG]->tile * ch[kK]->tile, ch[kC]->tile, p.kernel[0], p.kernel[1], p.kernel[2]};
    case kY: return {ch[kN]->tile, ch[kG]->tile * ch[kK]->tile, ch[kS0]->y_max, ch[kS1]->y_max, ch[kS2]->y_max};
    case kB: return {ch[kG]->tile * ch[kK]->tile, 1, 1, 1, 1};
  }
  return {};
}

struct Candidate {
  Choice choice{};
  LoopOrder order = LoopOrder::k_outer;
  std::array<int, kLoopDims> loop{};
  int buffers = 3;
  std::vector<int64_t> input_loads;
  std::vector<int> input_slots;
  std::vector<size_t> input_slot_bytes;
  int output_slots = 1;
  size_t output_slot_bytes = 0, peak = 0, workspace = 0;
  double bytes_h2d = 0, bytes_d2h = 0;
};

// The per-chunk GEMM shape the cost model charges thin splits by.
void gemm_shape(const ConvProblem& p, bool cuda, const Choice& ch, TrafficEstimate& t) {
  const double kernel = static_cast<double>(p.kernel[0] * p.kernel[1] * p.kernel[2]);
  // On the GPU, output channels count every group of the chunk (cost_model.hpp's
  // kHalfRateGroupedChannels); the host backend's loops run group by group.
  t.grouped = cuda && p.groups > 1;
  const double groups = t.grouped ? static_cast<double>(ch[kG]->tile) : 1.0;
  switch (p.op) {
    case Operation::backward_data:  // dx[c, pos] = sum over k, taps of w * dy
      t.reduction_depth = static_cast<double>(ch[kK]->tile) * kernel;
      t.output_channels = static_cast<double>(ch[kC]->tile) * groups;
      break;
    case Operation::backward_filter:  // dw[k, c * taps] = sum over n, positions of dy * x
      t.reduction_depth = static_cast<double>(ch[kN]->tile * ch[kS0]->y_max * ch[kS1]->y_max * ch[kS2]->y_max);
      t.output_channels =
          std::min(static_cast<double>(ch[kK]->tile), static_cast<double>(ch[kC]->tile) * kernel) * groups;
      break;
    default:  // a plain reduction: no GEMM to be thin
      break;
  }
}

// Fills the spatial regions of a chunk along dimension d from its tile index.
void fill_spatial(const ConvProblem& p, const DimTiling& s, int d, int64_t index, Chunk& ch) {
  if (p.op == Operation::backward_data) {
    const Range target{index * s.tile, std::min((index + 1) * s.tile, p.in[d])};
    ch.target[d] = target;
    if (s.tiles == 1 && p.cudnn_can_pad(d)) {  // cuDNN pads it
      ch.out[d] = ch.out_read[d] = Range{0, p.out[d]};
      ch.in[d] = Range{0, p.in[d]};
      ch.compute_padding[d] = p.padding[d];
    } else {
      const BackwardDataRows r =
          backward_data_rows(target, p.out[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]);
      ch.out[d] = r.dy_rows;
      ch.out_read[d] = r.read;
      ch.in[d] = r.computed;
      ch.compute_padding[d] = 0;
    }
    return;
  }
  ch.out[d] = Range{index * s.tile, std::min((index + 1) * s.tile, p.out[d])};
  if (s.tiles == 1 && p.cudnn_can_pad(d)) {  // cuDNN pads it
    ch.in[d] = Range{0, p.in[d]};
    ch.compute_padding[d] = p.padding[d];
  } else {
    ch.in[d] = conv_input_range(ch.out[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]);
    ch.compute_padding[d] = 0;
  }
}

bool& load_flag(Chunk& ch, Family f) {
  switch (f) {
    case kX: return ch.load_x;
    case kW: return ch.load_w;
    default: return ch.load_y;
  }
}

std::vector<Chunk> expand_chunks(const ConvProblem& p, const Nest& nest, const Candidate& c) {
  const Choice& ch = c.choice;
  int64_t total = 1;
  for (int d = 0; d < kLoopDims; ++d) total *= ch[d]->tiles;
  std::vector<Chunk> chunks;
  chunks.reserve(static_cast<size_t>(total));
  std::array<int64_t, kLoopDims> index{}, prev{};
  for (int64_t i = 0; i < total; ++i) {
    // i enumerates the nest in c.loop's order, the last loop fastest.
    int64_t rem = i;
    for (int pos = kLoopDims - 1; pos >= 0; --pos) {
      const int d = c.loop[pos];
      index[d] = rem % ch[d]->tiles;
      rem /= ch[d]->tiles;
    }
    Chunk chunk;
    auto range = [&](int d) {
      return Range{index[d] * ch[d]->tile, std::min((index[d] + 1) * ch[d]->tile, nest.extent[d])};
    };
    chunk.n = range(kN);
    // A group tile of several groups has k and c whole (offer_candidates), so range(kK) and
    // range(kC) are then [0, per group).
    chunk.k = GroupedChannels{nest.extent[kK]}.channels(range(kG), range(kK));
    chunk.c = GroupedChannels{nest.extent[kC]}.channels(range(kG), range(kC));
    for (int d = 0; d < kMaxSpatial; ++d) fill_spatial(p, *ch[kS0 + d], d, index[kS0 + d], chunk);
    chunk.load_x = chunk.load_w = chunk.load_y = false;
    for (const TensorRole& t : nest.inputs) {
      bool changed = i == 0;
      for (int d = 0; d < kLoopDims; ++d) changed = changed || ((t.dims & bit(d)) && index[d] != prev[d]);
      load_flag(chunk, t.family) = changed;
    }
    chunk.first_c = chunk.last_c = true;
    for (int d = 0; d < kLoopDims; ++d)
      if (nest.reduction & bit(d)) {
        chunk.first_c = chunk.first_c && index[d] == 0;
        chunk.last_c = chunk.last_c && index[d] == ch[d]->tiles - 1;
      }
    chunks.push_back(chunk);
    prev = index;
  }
  return chunks;
}

// The workspace the candidate's algorithm may use. Backward filter's fast algorithm needs it in
// proportion to the x chunk: reserved here, so that the plan's chunks leave room for it (else
// cuDNN falls back to a 3.6x slower one).
size_t workspace_of(const ConvProblem& p, const PlannerConfig& config, const Nest& nest, const Candidate& c,
                    size_t workspace) {
  size_t w = workspace;
  if (p.op == Operation::backward_filter && workspace > 0 && config.filter_workspace_per_x_byte > 0)
    for (size_t i = 0; i < nest.inputs.size(); ++i)
      if (nest.inputs[i].family == kX)
        w = std::max(w, static_cast<size_t>(config.filter_workspace_per_x_byte *
                                            static_cast<double>(c.input_slot_bytes[i])) /
                            256 * 256);
  return w;
}

// Every combination of one tiling per loop dimension, in each of the nest's loop orders, at every
// pipeline depth; of equally fast ones the search keeps the first.
void offer_candidates(const ConvProblem& p, const PlannerConfig& config, const Nest& nest, size_t workspace,
                      CandidateSearch<Candidate>& search) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const double out_es = static_cast<double>(dtype_size(p.output_dtype()));  // float32 where dw / db accumulate
  const double output_bytes = static_cast<double>(p.op == Operation::backward_data     ? p.x_elements()
                                                  : p.op == Operation::backward_filter ? p.w_elements()
                                                                                       : p.k) *
                              out_es;
  const bool copies = layout_copies(config.backend == "cuda", p.op, p.layout, p.spatial_dims, p.dtype) !=
                      LayoutCopies::none;
  Candidate c;
  Choice& ch = c.choice;
  std::function<void(int)> visit = [&](int d) {
    if (d < kLoopDims) {
      for (const DimTiling& t : nest.tilings[d]) {
        ch[d] = &t;
        visit(d + 1);
      }
      return;
    }
    // A tile of several groups holds their channels whole, or its regions would not be boxes.
    if (ch[kG]->tile > 1 && (ch[kK]->tiles > 1 || ch[kC]->tiles > 1)) return;
    double chunks = 1;
    for (int e = 0; e < kLoopDims; ++e) chunks *= static_cast<double>(ch[e]->tiles);
    int64_t largest = slot_elements(nest.output, ch);
    for (const TensorRole& t : nest.inputs) largest = std::max(largest, slot_elements(t, ch));
    if (!search.within_limits(largest, chunks)) return;
    c.output_slot_bytes = slot_bytes(slot_elements(nest.output, ch), out_es);
    c.input_slot_bytes.clear();
    for (const TensorRole& t : nest.inputs) c.input_slot_bytes.push_back(slot_bytes(slot_elements(t, ch), es));
    c.workspace = workspace_of(p, config, nest, c, workspace);
    // A half backward filter accumulates dw in float32: the cuda backend computes each chunk's
    // partial dw in half into the workspace's tail first (cuda_backend.cu), so it is reserved.
    if (p.op == Operation::backward_filter && p.dtype != p.output_dtype())
      c.workspace += slot_bytes(slot_elements(nest.output, ch), es);
    if (copies) {  // x, w and y of the chunk: the output and the two inputs, in whichever roles
      int64_t elements[3] = {slot_elements(nest.output, ch), 0, 0};
      for (size_t i = 0; i < nest.inputs.size() && i < 2; ++i) elements[i + 1] = slot_elements(nest.inputs[i], ch);
      c.workspace += layout_copy_bytes(elements[0], elements[1], elements[2], p.dtype);
    }
    const int64_t out_tiles = output_tiles(nest, ch);
    int64_t shortest_run = contiguous_run(region_extent(p, nest.output.family, ch), family_extent(p, nest.output.family));
    for (const TensorRole& t : nest.inputs)
      shortest_run = std::min(shortest_run, contiguous_run(region_extent(p, t.family, ch), family_extent(p, t.family)));
    for (const auto& [order, loop] : nest.orders)
      for (int buffers : {3, 2, 1}) {
        c.order = order;
        c.loop = loop;
        c.buffers = buffers;
        c.input_loads.clear();
        c.input_slots.clear();
        c.bytes_h2d = p.beta != 0.0 ? once_elements(nest, nest.output, ch) * out_es : 0.0;
        c.peak = c.workspace;
        for (size_t i = 0; i < nest.inputs.size(); ++i) {
          const Loads l = loads_of(nest.inputs[i], ch, loop);
          c.input_loads.push_back(l.count);
          c.input_slots.push_back(static_cast<int>(std::min<int64_t>(buffers, l.count)));
          c.bytes_h2d += l.repeat * once_elements(nest, nest.inputs[i], ch) * es;
          c.peak += c.input_slots.back() * c.input_slot_bytes[i];
        }
        c.output_slots = static_cast<int>(std::min<int64_t>(buffers, out_tiles));
        c.peak += c.output_slots * c.output_slot_bytes;
        c.bytes_d2h = output_bytes;
        search.offer(c, {c.peak, largest, chunks}, [&] {
          TrafficEstimate t = traffic_estimate(c.bytes_h2d, c.bytes_d2h, p.flops(), chunks);
          gemm_shape(p, config.backend == "cuda", ch, t);
          t.copy_run_bytes = es * static_cast<double>(shortest_run);
          t.first_load_bytes = 0;
          for (size_t b : c.input_slot_bytes) t.first_load_bytes += static_cast<double>(b);
          t.last_store_bytes = static_cast<double>(c.output_slot_bytes);
          t.buffers = buffers;
          return predict_seconds(t, config.machine);
        });
      }
  };
  visit(0);
}

Plan plan_of(const ConvProblem& p, const PlannerConfig& config, const Nest& nest, const Candidate& best,
             double seconds) {
  Plan plan = plan_with_totals(p, config, best.workspace, best.peak, best.bytes_h2d, best.bytes_d2h, seconds);
  const Choice& b = best.choice;
  plan.tiling = Tiling{b[kN]->tile, b[kG]->tile * b[kK]->tile, b[kG]->tile * b[kC]->tile,
                       {b[kS0]->tile, b[kS1]->tile, b[kS2]->tile}, b[kG]->tile};
  plan.splits_g = b[kG]->tiles;
  plan.splits_n = b[kN]->tiles;
  plan.splits_k = b[kK]->tiles;
  plan.splits_c = b[kC]->tiles;
  plan.splits_out = {b[kS0]->tiles, b[kS1]->tiles, b[kS2]->tiles};
  plan.order = best.order;
  plan.buffers = best.buffers;
  plan.x_buffers = plan.w_buffers = plan.y_buffers = plan.bias_buffers = 0;
  auto assign = [&](Family f, int slots, size_t bytes) {
    switch (f) {
      case kX: plan.x_buffers = slots, plan.x_slot_bytes = bytes; break;
      case kW: plan.w_buffers = slots, plan.w_slot_bytes = bytes; break;
      case kY: plan.y_buffers = slots, plan.y_slot_bytes = bytes; break;
      case kB: plan.bias_buffers = slots, plan.bias_bytes = slots * bytes; break;
    }
  };
  for (size_t i = 0; i < nest.inputs.size(); ++i) {
    assign(nest.inputs[i].family, best.input_slots[i], best.input_slot_bytes[i]);
    if (nest.inputs[i].family == kW) plan.w_resident = best.input_loads[i] == 1;
  }
  assign(nest.output.family, best.output_slots, best.output_slot_bytes);
  plan.chunks = expand_chunks(p, nest, best);
  return plan;
}

Plan plan_with_workspace(const ConvProblem& p, const PlannerConfig& config) {
  const Nest nest = nest_of(p);
  const size_t workspace = p.op == Operation::backward_bias ? 0 : config.workspace_bytes;
  return search_plan<Candidate>(
      config.memory_limit, [&](auto& search) { offer_candidates(p, config, nest, workspace, search); },
      [&](const Candidate& best, double seconds) { return plan_of(p, config, nest, best, seconds); },
      [&](size_t need) { throw_out_of_budget(p, config.memory_limit, need, workspace != 0); });
}

}  // namespace

Plan plan_conv_backward_for(const ConvProblem& p, const PlannerConfig& config) {
  return planner_parts::with_grown_workspace(
      planner_parts::with_workspace_fallback(config, [&](const PlannerConfig& c) { return plan_with_workspace(p, c); }),
      config);
}

Plan plan_for(const ConvProblem& p, const PlannerConfig& config) {
  return p.op == Operation::forward ? plan_conv_forward_for(p, config) : plan_conv_backward_for(p, config);
}

}  // namespace ooc
