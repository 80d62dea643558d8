#include "exec/conv_pipeline.hpp"

#include <stdexcept>
#include <string>

#include "exec/chunk_pipeline.hpp"
#include "exec/region_copy.hpp"

namespace ooc {
namespace {

using Extent = std::array<int64_t, kMaxRank>;

// The tensor families of plan.hpp: every operation streams tensors shaped like x, w, y or bias.
enum class Family { x, w, y, bias };

TensorView view_of(const ConvProblem& p, Family f, const float* data) {
  Extent shape{};
  switch (f) {
    case Family::x: shape = {p.n, p.c, p.in[0], p.in[1], p.in[2]}; break;
    case Family::w: shape = {p.k, p.c / p.groups, p.kernel[0], p.kernel[1], p.kernel[2]}; break;
    case Family::y: shape = {p.n, p.k, p.out[0], p.out[1], p.out[2]}; break;
    case Family::bias: shape = {p.k, 1, 1, 1, 1}; break;
  }
  return TensorView::contiguous(data, shape, 5, dtype_size(p.dtype));
}

Box box_of(Range a, Range b, const std::array<Range, kMaxSpatial>& spatial) {
  Box box;
  box.lo = {a.begin, b.begin, spatial[0].begin, spatial[1].begin, spatial[2].begin};
  box.hi = {a.end, b.end, spatial[0].end, spatial[1].end, spatial[2].end};
  return box;
}

// A chunk's region of a tensor of family f.
Region region_of(const TensorView& v, Family f, const Chunk& ch, const ConvProblem& p) {
  switch (f) {
    case Family::x: return {v, box_of(ch.n, ch.c, ch.in)};
    case Family::y: return {v, box_of(ch.n, ch.k, ch.out)};
    case Family::w: return {v, box_of(ch.k, ch.c, {Range{0, p.kernel[0]}, Range{0, p.kernel[1]}, Range{0, p.kernel[2]}})};
    case Family::bias: break;
  }
  return {v, box_of(ch.k, Range{0, 1}, {Range{0, 1}, Range{0, 1}, Range{0, 1}})};
}

// The plan's slots for family f.
StreamedTensor streamed(const Plan& plan, Family f, const void* data) {
  switch (f) {
    case Family::x: return {data, plan.x_buffers, plan.x_slot_bytes};
    case Family::w: return {data, plan.w_buffers, plan.w_slot_bytes};
    case Family::y: return {data, plan.y_buffers, plan.y_slot_bytes};
    case Family::bias: break;
  }
  return {data, plan.bias_buffers, plan.bias_buffers ? plan.bias_bytes / plan.bias_buffers : 0};
}

bool loads(Family f, const Chunk& ch) { return f == Family::x ? ch.load_x : f == Family::w ? ch.load_w : ch.load_y; }

// An operation's tensors: inputs a and b (b absent: data == nullptr) and the output, each of a
// family; the spec streams their chunk regions through the plan's slots.
struct Tensor {
  Family family;
  const float* data;
};

OperationSpec spec_for(const Plan& plan, Operation op, Tensor a, Tensor b, Tensor out) {
  const ConvProblem& p = plan.problem;
  if (p.op != op)
    throw std::logic_error(std::string("pipeline: a plan for ") + operation_name(p.op) + " run as " +
                           operation_name(op));
  OperationSpec spec;
  spec.a = streamed(plan, a.family, a.data);
  if (b.data) spec.b = streamed(plan, b.family, b.data);
  spec.out = streamed(plan, out.family, out.data);
  spec.beta = p.beta;
  spec.workspace_bytes = plan.workspace_bytes;
  const TensorView av = view_of(p, a.family, a.data), bv = b.data ? view_of(p, b.family, b.data) : TensorView{},
                   ov = view_of(p, out.family, out.data);
  spec.a_region = [av, a, &p](const Chunk& ch) { return region_of(av, a.family, ch, p); };
  spec.b_region = [bv, b, &p](const Chunk& ch) { return region_of(bv, b.family, ch, p); };
  spec.out_region = [ov, out, &p](const Chunk& ch) { return region_of(ov, out.family, ch, p); };
  spec.a_loads = [a](const Chunk& ch) { return loads(a.family, ch); };
  spec.b_loads = [b](const Chunk& ch) { return loads(b.family, ch); };
  return spec;
}

// `region` seen through the window of its view over the whole first two dims x `spatial`: only
// that part is read (zeros elsewhere) or written back.
Region through_window(const Region& region, const std::array<Range, kMaxSpatial>& spatial) {
  const Extent lo{0, 0, spatial[0].begin, spatial[1].begin, spatial[2].begin};
  const Extent hi{region.view.shape[0], region.view.shape[1], spatial[0].end, spatial[1].end, spatial[2].end};
  return {region.view.window(lo, hi), region.box.shifted(lo)};
}

}  // namespace

OperationSpec conv_forward_spec(const Plan& plan, Backend& backend, const float* x, const float* w, const float* bias,
                                float* y) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::forward, {Family::x, x}, {Family::w, w}, {Family::y, y});
  if (p.has_bias) {  // stays on the device whole; added by the last chunk of each reduction
    spec.resident = Region{view_of(p, Family::bias, bias), Box{{0, 0, 0, 0, 0}, {p.k, 1, 1, 1, 1}}};
    spec.resident_bytes = plan.bias_bytes;
  }
  spec.compute = [&](const Chunk& ch, const float* xs, const float* ws, const float* bias_dev, float* ys, double beta,
                     void* workspace) {
    const float* chunk_bias = ch.last_c && p.has_bias ? bias_dev + ch.k.begin : nullptr;
    backend.conv_forward(chunk_shape(ch, p), xs, ws, chunk_bias, ys, p.alpha, beta, workspace, plan.workspace_bytes);
  };
  return spec;
}

RunStats run_conv_forward(const Plan& plan, Backend& backend, const float* x, const float* w, const float* bias,
                          float* y, ThreadPool& pool) {
  return run_chunks(plan, backend, pool, conv_forward_spec(plan, backend, x, w, bias, y));
}

RunStats run_conv_backward_data(const Plan& plan, Backend& backend, const float* dy, const float* w, float* dx,
                                ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::backward_data, {Family::y, dy}, {Family::w, w}, {Family::x, dx});
  // dy is read through a window over the contributing rows (the device's other dy rows are
  // zeros); dx is computed over a region wider than its target, and written back (and, for
  // beta != 0, read) only over the target: neighbouring chunks own the rest.
  spec.a_region = [inner = spec.a_region](const Chunk& ch) { return through_window(inner(ch), ch.out_read); };
  spec.out_region = [inner = spec.out_region](const Chunk& ch) { return through_window(inner(ch), ch.target); };
  spec.compute = [&](const Chunk& ch, const float* dys, const float* ws, const float*, float* dxs, double beta,
                     void* workspace) {
    backend.conv_backward_data(chunk_shape(ch, p), dys, ws, dxs, p.alpha, beta, workspace, plan.workspace_bytes);
  };
  return run_chunks(plan, backend, pool, spec);
}

RunStats run_conv_backward_filter(const Plan& plan, Backend& backend, const float* x, const float* dy, float* dw,
                                  ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::backward_filter, {Family::x, x}, {Family::y, dy}, {Family::w, dw});
  spec.compute = [&](const Chunk& ch, const float* xs, const float* dys, const float*, float* dws, double beta,
                     void* workspace) {
    backend.conv_backward_filter(chunk_shape(ch, p), xs, dys, dws, p.alpha, beta, workspace, plan.workspace_bytes);
  };
  return run_chunks(plan, backend, pool, spec);
}

RunStats run_conv_backward_bias(const Plan& plan, Backend& backend, const float* dy, float* db, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::backward_bias, {Family::y, dy}, {Family::y, nullptr}, {Family::bias, db});
  spec.compute = [&](const Chunk& ch, const float* dys, const float*, const float*, float* dbs, double beta, void*) {
    backend.conv_backward_bias(chunk_shape(ch, p), dys, dbs, p.alpha, beta);
  };
  return run_chunks(plan, backend, pool, spec);
}

}  // namespace ooc
