#include "exec/pool_activation_softmax_pipeline.hpp"

#include <functional>
#include <initializer_list>

#include "exec/chunk_pipeline.hpp"

namespace ooc {
namespace {

using Extent = std::array<int64_t, kMaxRank>;

Extent extent_of(const std::vector<int64_t>& shape) {
  Extent e{1, 1, 1, 1, 1};
  for (size_t i = 0; i < shape.size(); ++i) e[i] = shape[i];
  return e;
}

// A dense [n, c, in...] chunk as the layer kernels see it (k == c, out == in).
ChunkConv chunk_of(const Extent& e, const ConvProblem& p) {
  ChunkConv s;
  s.dtype = p.dtype;
  s.spatial_dims = p.spatial_dims;
  s.n = e[0];
  s.c = s.k = e[1];
  s.in = s.out = {e[2], e[3], e[4]};
  return s;
}

Extent chunk_extent(const Chunk& ch) {
  return {ch.n.size(), ch.c.size(), ch.in[0].size(), ch.in[1].size(), ch.in[2].size()};
}

ChunkConv dense_chunk(const Chunk& ch, const ConvProblem& p) { return chunk_of(chunk_extent(ch), p); }

// The chunk's n, c ranges and the spatial ranges s.
Box spatial_box(const Chunk& ch, const std::array<Range, kMaxSpatial>& s) {
  Box b;
  b.lo = {ch.n.begin, ch.c.begin, s[0].begin, s[1].begin, s[2].begin};
  b.hi = {ch.n.end, ch.c.end, s[0].end, s[1].end, s[2].end};
  return b;
}
Box chunk_box(const Chunk& ch) { return spatial_box(ch, ch.in); }

// The region `wide` of v seen through a window over `s` (and all of n, c): only that part is read
// (zeros elsewhere) or written back.
Region through_window(const TensorView& v, const Chunk& ch, const std::array<Range, kMaxSpatial>& s,
                      const std::array<Range, kMaxSpatial>& wide) {
  const Extent lo{0, 0, s[0].begin, s[1].begin, s[2].begin};
  const Extent hi{v.shape[0], v.shape[1], s[0].end, s[1].end, s[2].end};
  return Region{v.window(lo, hi), spatial_box(ch, wide).shifted(lo)};
}

// x- and y-shaped tensors, dense in the problem's layout (pooling serves channels-last; the
// element-wise layers and softmax are made channels-first: the Python layer hands the element-wise
// ones channels-last arrays in their memory order).
TensorView x_view(const ConvProblem& p, const void* data) {
  return TensorView::dense(data, {p.n, p.c, p.in[0], p.in[1], p.in[2]}, kMaxRank, dtype_size(p.dtype),
                           p.layout == Layout::channels_last);
}
TensorView y_view(const ConvProblem& p, const void* data) {
  return TensorView::dense(data, {p.n, p.c, p.out[0], p.out[1], p.out[2]}, kMaxRank, dtype_size(p.dtype),
                           p.layout == Layout::channels_last);
}

// The element-wise layers' spec: every tensor shaped like the output, each chunk one dense box of
// each; inputs in the order given (null: absent). beta != 0: the pipeline loads each chunk's
// output first, for the kernel to blend into.
OperationSpec elementwise_spec(const Plan& plan, std::initializer_list<const void*> inputs, void* out) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec;
  spec.beta = p.beta;
  for (const void* data : inputs) {
    if (!data) continue;
    spec.add_input({data, plan.buffers, plan.x_slot_bytes},
                   [v = x_view(p, data)](const Chunk& ch) { return Region{v, chunk_box(ch)}; });
  }
  spec.out = {out, plan.buffers, plan.y_slot_bytes};
  spec.out_region = [v = x_view(p, out)](const Chunk& ch) { return Region{v, chunk_box(ch)}; };
  return spec;
}

}  // namespace

RunStats run_pool_forward(const Plan& plan, Backend& backend, PoolMode mode, const void* x, void* y,
                          ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec;
  spec.beta = p.beta;  // the tile's y is loaded (zeros around it) and blended by the kernel
  spec.add_input({x, plan.x_buffers, plan.x_slot_bytes},
                 [xv = x_view(p, x)](const Chunk& ch) { return Region{xv, spatial_box(ch, ch.in)}; });
  spec.out = {y, plan.y_buffers, plan.y_slot_bytes};
  // The computed y rows (ch.out) are written back through a window over the tile (ch.target).
  spec.out_region = [yv = y_view(p, y)](const Chunk& ch) { return through_window(yv, ch, ch.target, ch.out); };
  spec.compute = [&backend, &plan, &p, mode](const Chunk& ch, const ChunkBuffers& b) {
    backend.pool_forward(chunk_shape(ch, plan), mode, b.in[0], b.out, p.alpha, b.beta);
  };
  return run_chunks(plan, backend, pool, spec);
}

RunStats run_pool_backward(const Plan& plan, Backend& backend, PoolMode mode, const void* y, const void* dy,
                           const void* x, void* dx, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  const TensorView yv = y_view(p, y), dyv = y_view(p, dy), xv = x_view(p, x), dxv = x_view(p, dx);
  const int slots = plan.buffers;
  OperationSpec spec;
  spec.beta = p.beta;
  spec.add_input({y, slots, plan.y_slot_bytes}, [yv](const Chunk& ch) { return Region{yv, spatial_box(ch, ch.out)}; });
  spec.add_input({dy, slots, plan.y_slot_bytes},
                 [dyv](const Chunk& ch) { return through_window(dyv, ch, ch.out_read, ch.out); });
  spec.add_input({x, slots, plan.x_slot_bytes}, [xv](const Chunk& ch) { return Region{xv, spatial_box(ch, ch.in)}; });
  spec.out = {dx, slots, plan.x_slot_bytes};
  spec.out_region = [dxv](const Chunk& ch) { return through_window(dxv, ch, ch.target, ch.in); };
  spec.compute = [&backend, &plan, &p, mode](const Chunk& ch, const ChunkBuffers& b) {
    backend.pool_backward(chunk_shape(ch, plan), mode, b.in[0], b.in[1], b.in[2], b.out, p.alpha, b.beta);
  };
  return run_chunks(plan, backend, pool, spec);
}

namespace {

// An element-wise layer: `inputs` streamed as dense boxes, `kernel` computing each chunk.
using LayerKernel = std::function<void(const ChunkConv& chunk, const ChunkBuffers& buffers)>;
RunStats run_elementwise(const Plan& plan, Backend& backend, ThreadPool& pool,
                         std::initializer_list<const void*> inputs, void* out, const LayerKernel& kernel) {
  OperationSpec spec = elementwise_spec(plan, inputs, out);
  spec.compute = [&kernel, &p = plan.problem](const Chunk& ch, const ChunkBuffers& b) {
    kernel(dense_chunk(ch, p), b);
  };
  return run_chunks(plan, backend, pool, spec);
}

}  // namespace

RunStats run_activation_forward(const Plan& plan, Backend& backend, ActivationMode mode, double coef, const void* x,
                                void* y, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  return run_elementwise(plan, backend, pool, {x}, y, [&](const ChunkConv& s, const ChunkBuffers& b) {
    backend.activation_forward(s, mode, coef, b.in[0], b.out, p.alpha, b.beta);
  });
}

RunStats run_activation_backward(const Plan& plan, Backend& backend, ActivationMode mode, double coef, const void* y,
                                 const void* dy, const void* x, void* dx, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  // x null: the gradient follows from y (relu's mask is the same on y as on x), which stands in.
  return run_elementwise(plan, backend, pool, {y, dy, x}, dx, [&](const ChunkConv& s, const ChunkBuffers& b) {
    backend.activation_backward(s, mode, coef, b.in[0], b.in[1], b.inputs > 2 ? b.in[2] : b.in[0], b.out, p.alpha,
                                b.beta);
  });
}

RunStats run_softmax_forward(const Plan& plan, Backend& backend, SoftmaxMode mode, bool log, const void* x, void* y,
                             ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  return run_elementwise(plan, backend, pool, {x}, y, [&](const ChunkConv& s, const ChunkBuffers& b) {
    backend.softmax_forward(s, mode, log, b.in[0], b.out, p.alpha, b.beta);
  });
}

RunStats run_softmax_backward(const Plan& plan, Backend& backend, SoftmaxMode mode, bool log, const void* y,
                              const void* dy, void* dx, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  return run_elementwise(plan, backend, pool, {y, dy}, dx, [&](const ChunkConv& s, const ChunkBuffers& b) {
    backend.softmax_backward(s, mode, log, b.in[0], b.in[1], b.out, p.alpha, b.beta);
  });
}

RunStats run_add_tensor(const Plan& plan, Backend& backend, const std::vector<int64_t>& a_shape,
                        const std::array<bool, 5>& broadcast_full, const void* a, const void* c, void* out,
                        ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  // Streamed: the broadcast tensor a, one box per chunk (1 along its broadcast dims), then c,
  // unless out is c, which the pipeline then loads itself (scaled by beta).
  const bool separate = out != c;
  OperationSpec spec = elementwise_spec(plan, {}, out);
  const TensorView av = TensorView::contiguous(a, extent_of(a_shape), kMaxRank, dtype_size(p.dtype));
  spec.add_input({a, plan.w_buffers, plan.w_slot_bytes}, [av, broadcast_full](const Chunk& ch) {
    Box b = chunk_box(ch);
    for (int d = 0; d < kMaxRank; ++d)
      if (!broadcast_full[d]) b.lo[d] = 0, b.hi[d] = 1;
    return Region{av, b};
  });
  if (separate)
    spec.add_input({c, plan.buffers, plan.x_slot_bytes},
                   [v = x_view(p, c)](const Chunk& ch) { return Region{v, chunk_box(ch)}; });
  spec.beta = separate ? 0.0 : p.beta;
  spec.compute = [&backend, &p, broadcast_full, separate](const Chunk& ch, const ChunkBuffers& b) {
    Extent box = chunk_extent(ch), abox = box;
    for (int d = 0; d < kMaxRank; ++d)
      if (!broadcast_full[d]) abox[d] = 1;
    backend.add_tensor(chunk_of(abox, p), chunk_of(box, p), p.alpha, b.in[0], p.beta,
                       separate ? b.in[1] : nullptr, b.out);
  };
  return run_chunks(plan, backend, pool, spec);
}

}  // namespace ooc
