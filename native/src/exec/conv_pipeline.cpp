#include "exec/conv_pipeline.hpp"

#include <stdexcept>
#include <string>

#include "exec/chunk_pipeline.hpp"
#include "exec/conv_regions.hpp"
#include "exec/region_copy.hpp"

namespace ooc {
namespace {

using namespace conv_regions;  // NOLINT: the regions every convolution pipeline moves

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
  const void* data;
};

OperationSpec spec_for(const Plan& plan, Operation op, Tensor a, Tensor b, Tensor out) {
  const ConvProblem& p = plan.problem;
  if (p.op != op)
    throw std::logic_error(std::string("pipeline: a plan for ") + operation_name(p.op) + " run as " +
                           operation_name(op));
  OperationSpec spec;
  for (const Tensor& t : {a, b}) {
    if (!t.data) continue;
    const TensorView v = view_of(p, t.family, t.data);
    spec.add_input(streamed(plan, t.family, t.data), [v, t, &p](const Chunk& ch) { return region_of(v, t.family, ch, p); },
                   [t](const Chunk& ch) { return loads(t.family, ch); });
    spec.inputs.back().host_gather = v.border != PaddingMode::zeros;
  }
  spec.out = streamed(plan, out.family, out.data);
  spec.beta = p.beta;
  spec.workspace_bytes = plan.workspace_bytes;
  const TensorView ov = view_of(p, out.family, out.data, p.output_dtype());
  spec.out_region = [ov, out, &p](const Chunk& ch) { return region_of(ov, out.family, ch, p); };
  return spec;
}

}  // namespace

OperationSpec conv_forward_spec(const Plan& plan, Backend& backend, const void* x, const void* w, const void* bias,
                                void* y) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::forward, {Family::x, x}, {Family::w, w}, {Family::y, y});
  if (p.has_bias) {  // stays on the device whole; added by the last chunk of each reduction
    spec.resident = Region{view_of(p, Family::bias, bias), Box{{0, 0, 0, 0, 0}, {p.k, 1, 1, 1, 1}}};
    spec.resident_bytes = plan.bias_bytes;
  }
  spec.compute = [&](const Chunk& ch, const ChunkBuffers& b) {
    const void* chunk_bias = ch.last_c && p.has_bias ? advanced(b.resident, ch.k.begin, p.dtype) : nullptr;
    backend.conv_forward(chunk_shape(ch, plan), b.in[0], b.in[1], chunk_bias, b.out, p.alpha, b.beta, b.workspace,
                         plan.workspace_bytes);
  };
  return spec;
}

RunStats run_conv_forward(const Plan& plan, Backend& backend, const void* x, const void* w, const void* bias,
                          void* y, ThreadPool& pool) {
  return run_chunks(plan, backend, pool, conv_forward_spec(plan, backend, x, w, bias, y));
}

OperationSpec conv_backward_data_spec(const Plan& plan, Backend& backend, const void* dy, const void* w, void* dx) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::backward_data, {Family::y, dy}, {Family::w, w}, {Family::x, dx});
  // dy is read through a window over the contributing rows (the device's other dy rows are
  // zeros); dx is computed over a region wider than its target, and written back (and, for
  // beta != 0, read) only over the target: neighbouring chunks own the rest.
  StreamedInput& dy_in = spec.inputs[0];
  dy_in.region = [inner = dy_in.region](const Chunk& ch) { return through_window(inner(ch), ch.out_read); };
  spec.out_region = [inner = spec.out_region](const Chunk& ch) { return through_window(inner(ch), ch.target); };
  spec.compute = [&](const Chunk& ch, const ChunkBuffers& b) {
    backend.conv_backward_data(chunk_shape(ch, plan), b.in[0], b.in[1], b.out, p.alpha, b.beta, b.workspace,
                               plan.workspace_bytes);
  };
  return spec;
}

RunStats run_conv_backward_data(const Plan& plan, Backend& backend, const void* dy, const void* w, void* dx,
                                ThreadPool& pool) {
  return run_chunks(plan, backend, pool, conv_backward_data_spec(plan, backend, dy, w, dx));
}

RunStats run_conv_backward_filter(const Plan& plan, Backend& backend, const void* x, const void* dy, void* dw,
                                  ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::backward_filter, {Family::x, x}, {Family::y, dy}, {Family::w, dw});
  spec.compute = [&](const Chunk& ch, const ChunkBuffers& b) {
    backend.conv_backward_filter(chunk_shape(ch, plan), b.in[0], b.in[1], b.out, p.alpha, b.beta, b.workspace,
                                 plan.workspace_bytes);
  };
  return run_chunks(plan, backend, pool, spec);
}

RunStats run_conv_backward_bias(const Plan& plan, Backend& backend, const void* dy, void* db, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  OperationSpec spec = spec_for(plan, Operation::backward_bias, {Family::y, dy}, {Family::y, nullptr}, {Family::bias, db});
  spec.compute = [&](const Chunk& ch, const ChunkBuffers& b) {
    backend.conv_backward_bias(chunk_shape(ch, plan), b.in[0], b.out, p.alpha, b.beta);
  };
  return run_chunks(plan, backend, pool, spec);
}

}  // namespace ooc
