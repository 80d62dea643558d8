#include "exec/fused_pipeline.hpp"

#include <memory>
#include <stdexcept>
#include <vector>

#include "exec/chunk_pipeline.hpp"
#include "exec/conv_pipeline.hpp"
#include "exec/conv_regions.hpp"
#include "plan/fused_planner.hpp"

namespace ooc {
namespace {

// A dense [n, c, rows...] tile as the element-wise layers see it (activation, add_tensor).
ChunkConv tile_of(const ConvProblem& p, Range n, Range c, const std::array<Range, kMaxSpatial>& rows) {
  ChunkConv tile;
  tile.dtype = tile.out_dtype = p.dtype;
  tile.spatial_dims = p.spatial_dims;
  tile.n = n.size();
  tile.c = tile.k = c.size();
  for (int d = 0; d < kMaxSpatial; ++d) tile.in[d] = tile.out[d] = rows[d].size();
  return tile;
}

}  // namespace

namespace {

// conv_forward's spec, y tiles started from z where alpha2 != 0 and activated in place once their
// reduction is done: the forward part of the fused forwards.
OperationSpec bias_activation_spec(const Plan& plan, Backend& backend, const FusedActivation& activation,
                                   const void* x, const void* w, const void* z, const void* bias, void* y) {
  const ConvProblem& p = plan.problem;
  // conv_forward's spec already scales by alpha (alpha1), blends beta (alpha2) into the first chunk
  // of each reduction and adds bias on the last; z only replaces y as the tile it starts from.
  OperationSpec spec = conv_forward_spec(plan, backend, x, w, bias, y);
  if (p.beta != 0.0) {
    const TensorView zv = TensorView::contiguous(
        z, {p.n, p.k, p.out[0], p.out[1], p.out[2]}, kMaxRank, dtype_size(p.dtype));
    spec.init_data = z;
    spec.init_region = [y_region = spec.out_region, zv](const Chunk& ch) {
      Region r = y_region(ch);
      r.view = zv;
      return r;
    };
  }
  // The finished tile (after the reduction's last chunk added bias) is activated in place, on the
  // device, before it is written back (or pooled).
  if (activation.identity) return spec;
  spec.compute = [conv = spec.compute, &backend, &p, activation](const Chunk& ch, const ChunkBuffers& b) {
    conv(ch, b);
    if (!ch.last_c) return;
    backend.activation_forward(tile_of(p, ch.n, ch.k, ch.out), activation.mode, activation.coef, b.out, b.out, 1.0,
                               0.0);
  };
  return spec;
}

}  // namespace

RunStats run_conv_bias_activation_forward(const Plan& plan, Backend& backend, const FusedActivation& activation,
                                          const void* x, const void* w, const void* z, const void* bias, void* y,
                                          ThreadPool& pool) {
  return run_chunks(plan, backend, pool, bias_activation_spec(plan, backend, activation, x, w, z, bias, y));
}

RunStats run_conv_bias_activation_pooling_forward(const Plan& plan, Backend& backend,
                                                  const FusedActivation& activation, const ConvProblem& pool,
                                                  PoolMode mode, const void* x, const void* w, const void* z,
                                                  const void* bias, void* out, ThreadPool& pool_threads) {
  using namespace conv_regions;  // NOLINT: the regions of the convolution's tensors
  const ConvProblem& p = plan.problem;
  // The y tiles (ch.out) accumulate in the output slots as conv_forward's do; out (pooled) is
  // written back from them: the pooled rows computed (out_read) through a window over the tile.
  OperationSpec spec = bias_activation_spec(plan, backend, activation, x, w, z, bias, out);
  const TensorView qv = TensorView::contiguous(out, {pool.n, pool.c, pool.out[0], pool.out[1], pool.out[2]},
                                               kMaxRank, dtype_size(p.dtype));
  spec.out_region = [qv](const Chunk& ch) { return through_window(Region{qv, box_of(ch.n, ch.k, ch.out_read)}, ch.target); };
  spec.scratch_bytes = plan.scratch_bytes;
  // Once a y tile is finished (and activated), pool it into the scratch and copy the pooled tile to
  // the start of the slot, where the write-back reads it.
  spec.compute = [conv = spec.compute, &backend, &p, &pool, mode](const Chunk& ch, const ChunkBuffers& b) {
    conv(ch, b);
    if (!ch.last_c) return;
    ChunkConv window;
    window.dtype = window.out_dtype = p.dtype;  // the y tile's, which it pools
    window.spatial_dims = p.spatial_dims;
    window.n = ch.n.size();
    window.c = window.k = ch.k.size();
    int64_t pooled = window.n * window.c;
    for (int d = 0; d < kMaxSpatial; ++d) {
      window.in[d] = ch.out[d].size();
      window.out[d] = ch.out_read[d].size();
      window.kernel[d] = pool.kernel[d];
      window.stride[d] = pool.stride[d];
      window.padding[d] = pool.padding[d];
      pooled *= window.out[d];
    }
    backend.pool_forward(window, mode, b.out, b.scratch, 1.0, 0.0);
    StridedCopy copy;
    copy.src = static_cast<const char*>(b.scratch);
    copy.dst = static_cast<char*>(b.out);
    copy.width_bytes = copy.src_pitch = copy.dst_pitch = static_cast<size_t>(pooled) * dtype_size(p.dtype);
    copy.src_slice = copy.dst_slice = copy.width_bytes;
    backend.copy_on_device(copy);
  };
  return run_chunks(plan, backend, pool_threads, spec);
}

RunStats run_deconv_bias_activation_forward(const Plan& plan, Backend& backend, const FusedActivation& activation,
                                            const void* x, const void* w, const void* z, const void* bias,
                                            void* y, ThreadPool& pool) {
  using namespace conv_regions;  // NOLINT: the regions of the convolution's tensors
  const ConvProblem& p = plan.problem;  // backward data: dy = x, dx = y
  OperationSpec spec = conv_backward_data_spec(plan, backend, x, w, y);
  if (p.beta != 0.0) {  // each dx tile starts from z's target rows, as backward data's beta reads dx
    const TensorView zv = view_of(p, Family::x, z);
    spec.init_data = z;
    spec.init_region = [zv, &p](const Chunk& ch) {
      return through_window(region_of(zv, Family::x, ch, p), ch.target);
    };
  }
  if (p.has_bias) {  // per output channel: c of the backward-data problem; resident, like the forward's
    spec.resident = Region{TensorView::contiguous(bias, {p.c, 1, 1, 1, 1}, kMaxRank, dtype_size(p.dtype)),
                           Box{{0, 0, 0, 0, 0}, {p.c, 1, 1, 1, 1}}};
    spec.resident_bytes = plan.bias_bytes;
  }
  // A finished tile (the reduction over k done) gets bias and the activation over its whole
  // computed region, on the device; only its target rows are written back.
  spec.compute = [data = spec.compute, &backend, &p, activation](const Chunk& ch, const ChunkBuffers& b) {
    data(ch, b);
    if (!ch.last_c) return;
    void* ys = b.out;
    const ChunkConv tile = tile_of(p, ch.n, ch.c, ch.in);
    if (p.has_bias) {
      ChunkConv per_channel = tile;
      per_channel.n = 1;
      per_channel.in = per_channel.out = {1, 1, 1};
      backend.add_tensor(per_channel, tile, 1.0, advanced(b.resident, ch.c.begin, p.dtype), 1.0, nullptr, ys);
    }
    if (!activation.identity) backend.activation_forward(tile, activation.mode, activation.coef, ys, ys, 1.0, 0.0);
  };
  return run_chunks(plan, backend, pool, spec);
}

namespace {

// The fused backward's streamed inputs, in ChunkBuffers::in order; the fused forms add theirs after.
enum FusedBackwardInput { kDy = 0, kX = 1, kW = 2, kFirstExtra = 3 };

// The spec of the fused backward: dx, dw and db from each dy tile (fused_planner.hpp).
OperationSpec backward_spec(const Plan& plan, Backend& backend, const void* x, const void* dy, const void* w,
                            void* dx, void* dw, void* db) {
  using namespace conv_regions;  // NOLINT: the regions of the convolution's tensors
  const ConvProblem& p = plan.problem;
  const FusedBackwardLayout layout = recorded_layout(plan);
  const size_t es = dtype_size(p.dtype);
  const TensorView dyv = view_of(p, Family::y, dy), xv = view_of(p, Family::x, x), wv = view_of(p, Family::w, w),
                   dxv = view_of(p, Family::x, dx);
  OperationSpec spec;
  // kDy: the dy tile, loaded once and used by every c-tile; kX: the x slab; kW: w's c-tile.
  spec.add_input({dy, plan.y_buffers, plan.y_slot_bytes},
                 [dyv, &p](const Chunk& ch) { return region_of(dyv, Family::y, ch, p); },
                 [](const Chunk& ch) { return ch.load_y; });
  spec.add_input({x, plan.x_buffers, plan.x_slot_bytes},
                 [xv, &p](const Chunk& ch) { return region_of(xv, Family::x, ch, p); },
                 [](const Chunk& ch) { return ch.load_x; });
  spec.add_input({w, plan.w_buffers, plan.w_slot_bytes},
                 [wv, &p](const Chunk& ch) { return region_of(wv, Family::w, ch, p); },
                 [](const Chunk& ch) { return ch.load_w; });
  // dx is computed over the tile's whole reach and written back over its target rows only.
  spec.out = {dx, plan.out_buffers, plan.out_slot_bytes};
  spec.out_region = [dxv, &p](const Chunk& ch) { return through_window(region_of(dxv, Family::x, ch, p), ch.target); };
  spec.beta = 0.0;
  spec.workspace_bytes = plan.workspace_bytes;
  // dw (one dense block per c-tile) and db stay on the device and leave once, at the end.
  const std::array<Range, kMaxSpatial> taps{Range{0, p.kernel[0]}, Range{0, p.kernel[1]}, Range{0, p.kernel[2]}};
  for (size_t j = 0; j < layout.dw_offset.size(); ++j) {
    const Range c{static_cast<int64_t>(j) * plan.tiling.c, std::min((static_cast<int64_t>(j) + 1) * plan.tiling.c, p.c)};
    spec.kept.push_back({Region{view_of(p, Family::w, dw, kKeptDtype), box_of(Range{0, p.k}, c, taps)},
                         layout.dw_offset[j]});
  }
  spec.kept.push_back({Region{view_of(p, Family::bias, db, kKeptDtype), box_of(Range{0, p.k}, Range{0, 1}, {Range{0, 1},
                                                                                                Range{0, 1},
                                                                                                Range{0, 1}})},
                       layout.db_offset});
  spec.kept_bytes = plan.kept_bytes;
  spec.scratch_bytes = plan.scratch_bytes;

  // Per c-tile: the dx rows (along the split dimension) its carry block holds for the next tile.
  auto carried_rows = std::make_shared<std::vector<Range>>(layout.dw_offset.size());
  const int d = layout.split_dim;
  spec.compute = [&plan, &p, &backend, layout, carried_rows, d, es](const Chunk& ch, const ChunkBuffers& b) {
    std::vector<Range>& carried = *carried_rows;
    const ChunkConv shape = chunk_shape(ch, plan);
    const size_t j = static_cast<size_t>(ch.c.begin / plan.tiling.c);
    const Extent slot_extent{ch.n.size(), ch.c.size(), ch.in[0].size(), ch.in[1].size(), ch.in[2].size()};
    const TensorView slot = TensorView::contiguous(b.out, slot_extent, kMaxRank, es);
    char* carry = static_cast<char*>(b.scratch) + (layout.scratch_bytes ? layout.carry_offset[j] : 0);
    // The slot's rows `rows` (absolute dx rows along the split dimension), all of the other dims.
    auto rows_box = [&](Range rows) {
      Box box{{0, 0, 0, 0, 0}, slot_extent};
      box.lo[2 + d] = rows.begin - ch.in[d].begin;
      box.hi[2 + d] = rows.end - ch.in[d].begin;
      return box;
    };
    // dx: the carried rows of the previous tile first (the rest zero), then this tile's part added.
    double dx_beta = 0.0;
    if (d >= 0 && carried[j].size() > 0) {
      if (carried[j].begin < ch.in[d].begin || carried[j].end > ch.in[d].end)
        throw std::logic_error("fused backward: carried dx rows outside the next tile's computed rows");
      backend.zero_on_device(b.out, static_cast<size_t>(Box{{0, 0, 0, 0, 0}, slot_extent}.elements(kMaxRank)) * es);
      for (const StridedCopy& c : strided_box_copies(slot, rows_box(carried[j]), carry, false).copies)
        backend.copy_on_device(c);
      dx_beta = 1.0;
    }
    backend.conv_backward_data(shape, b.in[kDy], b.in[kW], b.out, p.alpha, dx_beta, b.workspace, plan.workspace_bytes);
    if (d >= 0) {
      const Range outgoing{ch.target[d].end, std::min(ch.in[d].end, p.in[d])};
      carried[j] = outgoing.size() > 0 ? outgoing : Range{};
      if (outgoing.size() > 0)
        for (const StridedCopy& c : strided_box_copies(slot, rows_box(outgoing), carry, true).copies)
          backend.copy_on_device(c);
    }
    // dw and db: this dy tile's part, the first dy tile overwriting what the device holds, summed
    // in kKeptDtype (float32) whatever the tensors' dtype.
    bool first_tile = ch.n.begin == 0;
    for (int e = 0; e < kMaxSpatial; ++e) first_tile = first_tile && ch.out[e].begin == 0;
    const double kept_beta = first_tile ? 0.0 : 1.0;
    ChunkConv kept_shape = shape;
    kept_shape.out_dtype = kKeptDtype;
    backend.conv_backward_filter(kept_shape, b.in[kX], b.in[kDy], b.kept + layout.dw_offset[j],
                                 p.alpha, kept_beta, b.workspace, plan.workspace_bytes);
    if (ch.c.begin == 0)
      backend.conv_backward_bias(kept_shape, b.in[kDy], b.kept + layout.db_offset, p.alpha,
                                 kept_beta);
  };
  return spec;
}

}  // namespace

RunStats run_conv_backward_data_filter_bias(const Plan& plan, Backend& backend, const void* x, const void* dy,
                                            const void* w, void* dx, void* dw, void* db, ThreadPool& pool) {
  return run_chunks(plan, backend, pool, backward_spec(plan, backend, x, dy, w, dx, dw, db));
}

namespace {

// The copy of rows `rows` (along dimension d) of a dense tile spanning rows `from` along d into one
// spanning `to`; all other dims equal: `outer` elements before d (planes and leading dims), `inner`
// after it.
StridedCopy rows_copy(const void* src, Range from, void* dst, Range to, Range rows, int64_t outer, int64_t inner,
                      size_t element_size) {
  StridedCopy c;
  c.src = static_cast<const char*>(src) + static_cast<size_t>((rows.begin - from.begin) * inner) * element_size;
  c.dst = static_cast<char*>(dst) + static_cast<size_t>((rows.begin - to.begin) * inner) * element_size;
  c.width_bytes = static_cast<size_t>(rows.size() * inner) * element_size;
  c.height = static_cast<size_t>(outer);
  c.src_pitch = static_cast<size_t>(from.size() * inner) * element_size;
  c.dst_pitch = static_cast<size_t>(to.size() * inner) * element_size;
  c.src_slice = c.src_pitch * c.height;
  c.dst_slice = c.dst_pitch * c.height;
  return c;
}

}  // namespace

RunStats run_pooling_activation_conv_backward_data_filter_bias(
    const Plan& plan, Backend& backend, const FusedActivation& activation, const ConvProblem& pool, PoolMode mode,
    const void* x, const void* dq, const void* w, const void* q, const void* y, const void* pre, void* dx,
    void* dw, void* db, ThreadPool& threads) {
  using namespace conv_regions;  // NOLINT: the regions of the convolution's tensors
  const ConvProblem& p = plan.problem;
  const size_t es = dtype_size(p.dtype);
  const FusedBackwardLayout layout = recorded_layout(plan);
  OperationSpec spec = backward_spec(plan, backend, x, nullptr, w, dx, dw, db);
  // Per dy tile: dq and q over the pooled rows reaching it, y (and pre) over their windows.
  const auto rows_of = [&plan, &pool](const Chunk& ch, bool pooled) {
    std::array<Range, kMaxSpatial> r;
    for (int d = 0; d < kMaxSpatial; ++d) {
      const PooledRows rows = pooled_rows(pool, d, ch.out[d], plan.splits_out[d] == 1);
      r[d] = pooled ? rows.pooled : rows.y;
    }
    return r;
  };
  const TensorView dqv = TensorView::contiguous(dq, {pool.n, pool.c, pool.out[0], pool.out[1], pool.out[2]}, kMaxRank,
                                                es);
  const TensorView qv = TensorView::contiguous(q, {pool.n, pool.c, pool.out[0], pool.out[1], pool.out[2]}, kMaxRank,
                                               es);
  // dq streams where dy would (its tile becomes dz on the device); q, y and pre after the three.
  StreamedInput& dq_in = spec.inputs[kDy];
  dq_in.tensor = {dq, plan.y_buffers, plan.pooled_slot_bytes};
  dq_in.region = [dqv, rows_of](const Chunk& ch) { return Region{dqv, box_of(ch.n, ch.k, rows_of(ch, true))}; };
  spec.add_input({q, plan.y_buffers, plan.pooled_slot_bytes},
                 [qv, rows_of](const Chunk& ch) { return Region{qv, box_of(ch.n, ch.k, rows_of(ch, true))}; },
                 [](const Chunk& ch) { return ch.load_y; });
  for (const void* t : {y, pre}) {
    if (!t) continue;
    const TensorView v = view_of(p, Family::y, t);
    spec.add_input({t, plan.y_buffers, plan.y_slot_bytes},
                   [v, rows_of](const Chunk& ch) { return Region{v, box_of(ch.n, ch.k, rows_of(ch, false))}; },
                   [](const Chunk& ch) { return ch.load_y; });
  }
  const int q_in = kFirstExtra, y_in = kFirstExtra + 1, pre_in = kFirstExtra + 2;
  // A tile's first chunk: dy = pool_backward over the windows' y rows, dz = act'(pre) * dy there
  // (in place), then the tile's own dy rows of it (zeros where no window reaches) into the scratch
  // the three gradients read; nothing of it leaves the device.
  spec.compute = [gradients = spec.compute, &backend, &p, &pool, &plan, mode, activation, layout, rows_of, es, q_in,
                  y_in, pre_in](const Chunk& ch, const ChunkBuffers& b) {
    char* scratch = static_cast<char*>(b.scratch);
    void* dz = scratch + layout.dy_offset;
    if (ch.load_y) {
      void* pooled_dy = scratch + layout.pooled_dy_offset;
      const std::array<Range, kMaxSpatial> y_rows = rows_of(ch, false), q_rows = rows_of(ch, true);
      ChunkConv window = chunk_shape(ch, plan);
      window.c = window.k = p.k;
      int64_t y_elements = ch.n.size() * p.k, dz_elements = y_elements, q_elements = y_elements;
      for (int d = 0; d < kMaxSpatial; ++d) {
        window.in[d] = y_rows[d].size();
        window.out[d] = q_rows[d].size();
        window.kernel[d] = pool.kernel[d];
        window.stride[d] = pool.stride[d];
        window.dilation[d] = 1;
        window.padding[d] = pooled_rows(pool, d, ch.out[d], plan.splits_out[d] == 1).padding;
        y_elements *= window.in[d];
        q_elements *= window.out[d];
        dz_elements *= ch.out[d].size();
      }
      const void* y_tile = b.in[y_in];
      if (q_elements > 0) {
        backend.pool_backward(window, mode, b.in[q_in], b.in[kDy], y_tile, pooled_dy, 1.0, 0.0);
        if (!activation.identity)
          backend.activation_backward(tile_of(p, ch.n, ch.k, y_rows), activation.mode, activation.coef, y_tile,
                                      pooled_dy, b.inputs > pre_in ? b.in[pre_in] : y_tile, pooled_dy, 1.0, 0.0);
      }
      backend.zero_on_device(dz, static_cast<size_t>(dz_elements) * es);
      int split = -1;
      for (int d = 0; d < kMaxSpatial; ++d)
        if (plan.splits_out[d] > 1) split = d;
      const int d = split < 0 ? 0 : split;  // whole dims: the tile's rows are the windows' rows
      const Range common{std::max(ch.out[d].begin, y_rows[d].begin), std::min(ch.out[d].end, y_rows[d].end)};
      if (q_elements > 0 && common.size() > 0) {
        int64_t outer = ch.n.size() * p.k, inner = 1;
        for (int e = 0; e < kMaxSpatial; ++e) {
          if (e < d) outer *= ch.out[e].size();
          if (e > d) inner *= ch.out[e].size();
        }
        backend.copy_on_device(rows_copy(pooled_dy, y_rows[d], dz, ch.out[d], common, outer, inner, es));
      }
    }
    ChunkBuffers with_dz = b;
    with_dz.in[kDy] = dz;
    gradients(ch, with_dz);
  };
  return run_chunks(plan, backend, threads, spec);
}

RunStats run_activation_conv_backward_data_filter_bias(const Plan& plan, Backend& backend,
                                                       const FusedActivation& activation, const void* x,
                                                       const void* dy, const void* w, const void* y,
                                                       const void* pre, void* dx, void* dw, void* db,
                                                       ThreadPool& pool) {
  using namespace conv_regions;  // NOLINT: the regions of the convolution's tensors
  const ConvProblem& p = plan.problem;
  if (plan.y_inputs != (pre ? 3 : 2))
    throw std::logic_error("fused backward: the plan streams another number of y-shaped tensors");
  OperationSpec spec = backward_spec(plan, backend, x, dy, w, dx, dw, db);
  // y (and the activation's input) beside each dy tile, loaded with it.
  for (const void* t : {y, pre}) {
    if (!t) continue;
    const TensorView v = view_of(p, Family::y, t);
    spec.add_input({t, plan.y_buffers, plan.y_slot_bytes},
                   [v, &p](const Chunk& ch) { return region_of(v, Family::y, ch, p); },
                   [](const Chunk& ch) { return ch.load_y; });
  }
  const int y_in = kFirstExtra, pre_in = kFirstExtra + 1;
  // The dy tile becomes dz = f'(pre) * dy where it lies, on the device, once per tile (its first
  // chunk); every c-tile then reads dz. relu, sigmoid and tanh need only y (relu's mask is the same
  // on y as on its input).
  spec.compute = [gradients = spec.compute, &backend, &p, activation, y_in, pre_in](const Chunk& ch,
                                                                                     const ChunkBuffers& b) {
    if (ch.load_y) {
      const ChunkConv tile = tile_of(p, ch.n, ch.k, ch.out);
      void* dz = const_cast<void*>(b.in[kDy]);  // the slot is the pipeline's device memory, loaded once
      backend.activation_backward(tile, activation.mode, activation.coef, b.in[y_in], b.in[kDy],
                                  b.inputs > pre_in ? b.in[pre_in] : b.in[y_in], dz, 1.0, 0.0);
    }
    gradients(ch, b);
  };
  return run_chunks(plan, backend, pool, spec);
}

}  // namespace ooc
