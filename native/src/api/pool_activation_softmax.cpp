// The layers of layers.hpp: problem checks, plans (plan/layer_planner) and the pipeline specs
// that stream their chunks (exec/chunk_pipeline) through the backend's layer kernels.
#include "ooc/layers.hpp"

#include <sstream>

#include "api/backend_access.hpp"
#include "exec/chunk_pipeline.hpp"
#include "exec/thread_pool.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/layer_planner.hpp"
#include "plan/shape_format.hpp"

namespace ooc {
namespace {

using Extent = std::array<int64_t, kMaxRank>;

template <typename Mode, size_t N>
Mode mode_from_name(const std::string& name, const char* what, const std::array<const char*, N>& names) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<Mode>(i);
  std::ostringstream msg;
  msg << what << " must be one of";
  for (size_t i = 0; i < N; ++i) msg << (i ? ", " : " ") << "'" << names[i] << "'";
  msg << "; got '" << name << "'";
  throw invalid_argument(msg.str());
}

Extent extent_of(const std::vector<int64_t>& shape) {
  Extent e{1, 1, 1, 1, 1};
  for (size_t i = 0; i < shape.size(); ++i) e[i] = shape[i];
  return e;
}

ChunkConv chunk_of(const Extent& e, int spatial_dims) {
  ChunkConv s;
  s.spatial_dims = spatial_dims;
  s.n = e[0];
  s.c = s.k = e[1];
  s.in = s.out = {e[2], e[3], e[4]};
  return s;
}

Extent chunk_extent(const Chunk& ch) {
  return {ch.n.size(), ch.c.size(), ch.in[0].size(), ch.in[1].size(), ch.in[2].size()};
}

Box spatial_box(const Chunk& ch, const std::array<Range, kMaxSpatial>& s);
Box chunk_box(const Chunk& ch) { return spatial_box(ch, ch.in); }

// The chunk's n, c ranges and the spatial ranges s.
Box spatial_box(const Chunk& ch, const std::array<Range, kMaxSpatial>& s) {
  Box b;
  b.lo = {ch.n.begin, ch.c.begin, s[0].begin, s[1].begin, s[2].begin};
  b.hi = {ch.n.end, ch.c.end, s[0].end, s[1].end, s[2].end};
  return b;
}

// The region `wide` of v seen through a window over `s` (and all of n, c): only that part is read
// (zeros elsewhere) or written back.
Region through_window(const TensorView& v, const Chunk& ch, const std::array<Range, kMaxSpatial>& s,
                      const std::array<Range, kMaxSpatial>& wide) {
  const Extent lo{0, 0, s[0].begin, s[1].begin, s[2].begin};
  const Extent hi{v.shape[0], v.shape[1], s[0].end, s[1].end, s[2].end};
  return Region{v.window(lo, hi), spatial_box(ch, wide).shifted(lo)};
}

// A full-size tensor of the problem, streamed chunk by chunk.
struct Streamed {
  TensorView view;
  StreamedTensor tensor;
  std::function<Region(const Chunk&)> region;
};

Streamed streamed(const Plan& plan, const void* data, int slots, size_t slot_bytes) {
  const ConvProblem& p = plan.problem;
  Streamed s;
  s.view = TensorView::contiguous(data, {p.n, p.c, p.in[0], p.in[1], p.in[2]}, 5, dtype_size(p.dtype));
  s.tensor = {data, slots, slot_bytes};
  s.region = [v = s.view](const Chunk& ch) { return Region{v, chunk_box(ch)}; };
  return s;
}

// beta != 0: the pipeline loads each chunk's output first, for the kernel to blend into.
OperationSpec elementwise_spec(const Plan& plan, const void* a, const void* b, const void* third, float* out,
                               double beta = 0.0) {
  OperationSpec spec;
  spec.beta = beta;
  const int slots = plan.buffers;
  const Streamed sa = streamed(plan, a, slots, plan.x_slot_bytes), so = streamed(plan, out, slots, plan.y_slot_bytes);
  spec.a = sa.tensor;
  spec.a_region = sa.region;
  spec.a_loads = [](const Chunk&) { return true; };
  if (b) {
    const Streamed sb = streamed(plan, b, slots, plan.x_slot_bytes);
    spec.b = sb.tensor;
    spec.b_region = sb.region;
  }
  spec.b_loads = [](const Chunk&) { return true; };
  if (third) {
    const Streamed st = streamed(plan, third, slots, plan.x_slot_bytes);
    spec.third = st.tensor;
    spec.third_region = st.region;
  }
  spec.out = so.tensor;
  spec.out_region = so.region;
  return spec;
}

// The problem of a layer that blends its result into the output: out = alpha * result + beta * out.
ConvProblem blended_problem(Operation op, const std::vector<int64_t>& shape, double alpha, double beta) {
  ConvProblem p = layer_problem(op, shape);
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

LayerPlanSpec blended_spec(LayerPlanSpec ls, double beta) {
  ls.reads_output = beta != 0.0;
  return ls;
}

void require(bool ok, const char* what) {
  if (!ok) throw invalid_argument(std::string(what) + ": null data pointer");
}

// Plans (and, when run is set, runs) one layer on the process-wide backend.
void plan_and_run(const ConvProblem& p, const LayerPlanSpec& ls, const Options& options, Plan* plan_out,
                  const std::function<OperationSpec(const Plan&, Backend&)>& make_spec, RunStats* stats) {
  with_backend(options, [&](Backend& backend, const PlannerConfig& config) {
    Plan plan = plan_layer(p, ls, config);
    if (make_spec) {
      RunStats s = run_chunks(plan, backend, ThreadPool::shared(), make_spec(plan, backend));
      if (stats) *stats = s;
    }
    if (plan_out) *plan_out = std::move(plan);
  });
}

LayerPlanSpec softmax_spec(SoftmaxMode mode, int full_inputs) {
  LayerPlanSpec ls;
  ls.full_inputs = full_inputs;
  const bool space = mode == SoftmaxMode::channel;  // c is never split; space only for channel mode
  ls.splittable = {true, false, space, space, space};
  ls.whole = mode == SoftmaxMode::channel ? "softmax over channels reduces over c, so c (for one position)"
                                          : "softmax over instances reduces over c and space, so one instance";
  return ls;
}

Plan run_plan(const ConvProblem& p, const LayerPlanSpec& ls, const Options& options) {
  Plan plan;
  plan_and_run(p, ls, options, &plan, nullptr, nullptr);
  return plan;
}

LayerPlanSpec add_spec(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& c_shape, bool in_place,
                       double beta) {
  if (a_shape.size() != c_shape.size())
    throw invalid_argument("a must have as many dimensions as c: a" + format_shape(a_shape) + ", c" +
                           format_shape(c_shape));
  LayerPlanSpec ls;
  ls.full_inputs = in_place ? 0 : 1;
  ls.reads_output = in_place && beta != 0.0;
  ls.has_broadcast = true;
  for (size_t d = 0; d < a_shape.size(); ++d) {
    if (a_shape[d] != 1 && a_shape[d] != c_shape[d])
      throw invalid_argument("a" + format_shape(a_shape) + " does not broadcast to c" + format_shape(c_shape) +
                             ": each dimension of a must be 1 or equal c's (dimension " + std::to_string(d) + ")");
    ls.broadcast_full[d] = a_shape[d] != 1 || c_shape[d] == 1;
  }
  return ls;
}

}  // namespace

ActivationMode activation_mode_from_name(const std::string& name) {
  return mode_from_name<ActivationMode>(
      name, "activation mode", std::array<const char*, 6>{"relu", "sigmoid", "tanh", "clipped_relu", "elu", "swish"});
}

PoolMode pool_mode_from_name(const std::string& name) {
  return mode_from_name<PoolMode>(name, "pooling mode", std::array<const char*, 3>{"max", "avg", "avg_exclude_pad"});
}

ConvProblem pool_problem(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
                         const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
  ConvProblem p = layer_problem(Operation::pool_forward, x_shape);
  const int sd = p.spatial_dims;
  auto expand = [&](const std::vector<int64_t>& v, const char* name, int64_t least) {
    if (v.size() != 1 && v.size() != static_cast<size_t>(sd))
      throw invalid_argument(std::string(name) + " must have 1 or " + std::to_string(sd) + " entries, got " +
                             format_shape(v));
    Dims3 out{1, 1, 1};
    if (least == 0) out = {0, 0, 0};
    for (int d = 0; d < sd; ++d) {
      out[d] = v.size() == 1 ? v[0] : v[d];
      if (out[d] < least)
        throw invalid_argument(std::string(name) + " must be " + (least ? "positive" : "non-negative") + ", got " +
                               format_shape(v));
    }
    return out;
  };
  p.kernel = expand(kernel, "kernel", 1);
  p.stride = expand(stride, "stride", 1);
  p.padding = expand(padding, "padding", 0);
  for (int d = 0; d < sd; ++d) {
    if (2 * p.padding[d] > p.kernel[d])
      throw invalid_argument("padding: pad should be at most half of effective kernel size, but got pad=" +
                             std::to_string(p.padding[d]) + ", kernel_size=" + std::to_string(p.kernel[d]) +
                             " (dimension " + std::to_string(d) + ")");
    p.out[d] = conv_output_size(p.in[d], p.kernel[d], p.stride[d], p.padding[d], 1);
    if (p.out[d] <= 0)
      throw invalid_argument("kernel: kernel size " + std::to_string(p.kernel[d]) +
                             " is larger than the padded input size " + std::to_string(p.in[d] + 2 * p.padding[d]) +
                             " (dimension " + std::to_string(d) + " of x" + format_shape(x_shape) + ")");
  }
  p.k = p.c;
  return p;
}

Plan plan_pool_forward(const ConvProblem& problem, const Options& options) {
  if (problem.op != Operation::pool_forward) throw invalid_argument("plan_pool_forward: not a pooling problem");
  Plan plan;
  with_backend(options, [&](Backend&, const PlannerConfig& config) { plan = plan_pool(problem, config); });
  return plan;
}

void pool_forward(const ConvProblem& p, PoolMode mode, const float* x, float* y, const Options& options, Plan* used,
                  RunStats* stats) {
  require(x && y, "pool_forward");
  if (p.op != Operation::pool_forward) throw invalid_argument("pool_forward: not a pooling problem");
  with_backend(options, [&](Backend& backend, const PlannerConfig& config) {
    Plan plan = plan_pool(p, config);
    OperationSpec spec;
    spec.beta = p.beta;  // the tile's y is loaded (zeros around it) and blended by the kernel
    const size_t es = dtype_size(p.dtype);
    const TensorView xv = TensorView::contiguous(x, {p.n, p.c, p.in[0], p.in[1], p.in[2]}, 5, es);
    const TensorView yv = TensorView::contiguous(y, {p.n, p.c, p.out[0], p.out[1], p.out[2]}, 5, es);
    spec.a = {x, plan.x_buffers, plan.x_slot_bytes};
    spec.out = {y, plan.y_buffers, plan.y_slot_bytes};
    spec.a_loads = spec.b_loads = [](const Chunk&) { return true; };
    spec.a_region = [xv](const Chunk& ch) { return Region{xv, spatial_box(ch, ch.in)}; };
    // The computed y rows (ch.out) are written back through a window over the tile (ch.target).
    spec.out_region = [yv](const Chunk& ch) { return through_window(yv, ch, ch.target, ch.out); };
    spec.compute = [&backend, &p, mode](const Chunk& ch, const float* xs, const float*, const float*, float* ys,
                                        double beta, void*) {
      backend.pool_forward(chunk_shape(ch, p), mode, xs, ys, p.alpha, beta);
    };
    RunStats s = run_chunks(plan, backend, ThreadPool::shared(), spec);
    if (stats) *stats = s;
    if (used) *used = std::move(plan);
  });
}

ConvProblem pool_backward_problem(const ConvProblem& forward) {
  if (forward.op != Operation::pool_forward) throw invalid_argument("pool_backward_problem: not a pooling problem");
  ConvProblem p = forward;
  p.op = Operation::pool_backward;
  return p;
}

Plan plan_pool_backward(const ConvProblem& problem, const Options& options) {
  if (problem.op != Operation::pool_backward) throw invalid_argument("plan_pool_backward: not a pool_backward problem");
  Plan plan;
  with_backend(options, [&](Backend&, const PlannerConfig& config) { plan = plan_pool_backward_for(problem, config); });
  return plan;
}

void pool_backward(const ConvProblem& p, PoolMode mode, const float* y, const float* dy, const float* x, float* dx,
                   const Options& options, Plan* used, RunStats* stats) {
  require(y && dy && x && dx, "pool_backward");
  if (p.op != Operation::pool_backward) throw invalid_argument("pool_backward: not a pool_backward problem");
  with_backend(options, [&](Backend& backend, const PlannerConfig& config) {
    Plan plan = plan_pool_backward_for(p, config);
    const size_t es = dtype_size(p.dtype);
    const Extent x_ext{p.n, p.c, p.in[0], p.in[1], p.in[2]}, y_ext{p.n, p.c, p.out[0], p.out[1], p.out[2]};
    const TensorView yv = TensorView::contiguous(y, y_ext, 5, es), dyv = TensorView::contiguous(dy, y_ext, 5, es),
                     xv = TensorView::contiguous(x, x_ext, 5, es), dxv = TensorView::contiguous(dx, x_ext, 5, es);
    const int slots = plan.buffers;
    OperationSpec spec;
    spec.beta = p.beta;
    spec.a = {y, slots, plan.y_slot_bytes};
    spec.b = {dy, slots, plan.y_slot_bytes};
    spec.third = {x, slots, plan.x_slot_bytes};
    spec.out = {dx, slots, plan.x_slot_bytes};
    spec.a_loads = spec.b_loads = [](const Chunk&) { return true; };
    spec.a_region = [yv](const Chunk& ch) { return Region{yv, spatial_box(ch, ch.out)}; };
    spec.b_region = [dyv](const Chunk& ch) { return through_window(dyv, ch, ch.out_read, ch.out); };
    spec.third_region = [xv](const Chunk& ch) { return Region{xv, spatial_box(ch, ch.in)}; };
    spec.out_region = [dxv](const Chunk& ch) { return through_window(dxv, ch, ch.target, ch.in); };
    spec.compute3 = [&backend, &p, mode](const Chunk& ch, const float* ys, const float* dys, const float* xs,
                                         float* dxs, double beta) {
      backend.pool_backward(chunk_shape(ch, p), mode, ys, dys, xs, dxs, p.alpha, beta);
    };
    RunStats s = run_chunks(plan, backend, ThreadPool::shared(), spec);
    if (stats) *stats = s;
    if (used) *used = std::move(plan);
  });
}

SoftmaxMode softmax_mode_from_name(const std::string& name) {
  return mode_from_name<SoftmaxMode>(name, "softmax mode", std::array<const char*, 2>{"channel", "instance"});
}

ConvProblem layer_problem(Operation op, const std::vector<int64_t>& shape) {
  if (op <= Operation::backward_bias) throw invalid_argument("layer_problem: not a layer operation");
  if (shape.size() < 3 || shape.size() > 5)
    throw invalid_argument(std::string(operation_name(op)) +
                           ": expected a tensor of rank 3 to 5 [n, c, spatial...], got " + format_shape(shape));
  for (int64_t d : shape)
    if (d <= 0) throw invalid_argument(std::string(operation_name(op)) + ": every dimension must be positive, got " +
                                       format_shape(shape));
  ConvProblem p;
  p.op = op;
  p.spatial_dims = static_cast<int>(shape.size()) - 2;
  p.n = shape[0];
  p.c = p.k = shape[1];
  for (int d = 0; d < p.spatial_dims; ++d) p.in[d] = p.out[d] = shape[2 + d];
  return p;
}

Plan plan_activation_forward(const std::vector<int64_t>& shape, const Options& options) {
  return run_plan(layer_problem(Operation::activation_forward, shape), LayerPlanSpec{}, options);
}

Plan plan_activation_backward(const std::vector<int64_t>& shape, const Options& options) {
  LayerPlanSpec ls;
  ls.full_inputs = 3;
  return run_plan(layer_problem(Operation::activation_backward, shape), ls, options);
}

Plan plan_softmax_forward(const std::vector<int64_t>& shape, SoftmaxMode mode, const Options& options) {
  return run_plan(layer_problem(Operation::softmax_forward, shape), softmax_spec(mode, 1), options);
}

Plan plan_softmax_backward(const std::vector<int64_t>& shape, SoftmaxMode mode, const Options& options) {
  return run_plan(layer_problem(Operation::softmax_backward, shape), softmax_spec(mode, 2), options);
}

Plan plan_add_tensor(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& c_shape, bool in_place,
                     const Options& options) {
  const LayerPlanSpec ls = add_spec(a_shape, c_shape, in_place, 1.0);
  return run_plan(layer_problem(Operation::add_tensor, c_shape), ls, options);
}

void activation_forward(const std::vector<int64_t>& shape, ActivationMode mode, double coef, const float* x, float* y,
                        const Options& options, Plan* used, RunStats* stats, double alpha, double beta) {
  require(x && y, "activation_forward");
  const ConvProblem p = blended_problem(Operation::activation_forward, shape, alpha, beta);
  plan_and_run(p, blended_spec(LayerPlanSpec{}, beta), options, used, [&](const Plan& plan, Backend& backend) {
    OperationSpec spec = elementwise_spec(plan, x, nullptr, nullptr, y, beta);
    spec.compute = [&backend, &p, mode, coef](const Chunk& ch, const float* xs, const float*, const float*, float* ys,
                                               double beta, void*) {
      backend.activation_forward(chunk_of(chunk_extent(ch), p.spatial_dims), mode, coef, xs, ys, p.alpha, beta);
    };
    return spec;
  }, stats);
}

void activation_backward(const std::vector<int64_t>& shape, ActivationMode mode, double coef, const float* y,
                         const float* dy, const float* x, float* dx, const Options& options, Plan* used,
                         RunStats* stats, double alpha, double beta) {
  require(y && dy && x && dx, "activation_backward");
  const ConvProblem p = blended_problem(Operation::activation_backward, shape, alpha, beta);
  LayerPlanSpec ls;
  ls.full_inputs = 3;
  plan_and_run(p, blended_spec(ls, beta), options, used, [&](const Plan& plan, Backend& backend) {
    OperationSpec spec = elementwise_spec(plan, y, dy, x, dx, beta);
    spec.compute3 = [&backend, &p, mode, coef](const Chunk& ch, const float* ys, const float* dys, const float* xs,
                                                float* dxs, double beta) {
      backend.activation_backward(chunk_of(chunk_extent(ch), p.spatial_dims), mode, coef, ys, dys, xs, dxs, p.alpha,
                                  beta);
    };
    return spec;
  }, stats);
}

void softmax_forward(const std::vector<int64_t>& shape, SoftmaxMode mode, bool log, const float* x, float* y,
                     const Options& options, Plan* used, RunStats* stats, double alpha, double beta) {
  require(x && y, "softmax_forward");
  const ConvProblem p = blended_problem(Operation::softmax_forward, shape, alpha, beta);
  plan_and_run(p, blended_spec(softmax_spec(mode, 1), beta), options, used, [&](const Plan& plan, Backend& backend) {
    OperationSpec spec = elementwise_spec(plan, x, nullptr, nullptr, y, beta);
    spec.compute = [&backend, &p, mode, log](const Chunk& ch, const float* xs, const float*, const float*, float* ys,
                                              double beta, void*) {
      backend.softmax_forward(chunk_of(chunk_extent(ch), p.spatial_dims), mode, log, xs, ys, p.alpha, beta);
    };
    return spec;
  }, stats);
}

void softmax_backward(const std::vector<int64_t>& shape, SoftmaxMode mode, bool log, const float* y, const float* dy,
                      float* dx, const Options& options, Plan* used, RunStats* stats, double alpha, double beta) {
  require(y && dy && dx, "softmax_backward");
  const ConvProblem p = blended_problem(Operation::softmax_backward, shape, alpha, beta);
  plan_and_run(p, blended_spec(softmax_spec(mode, 2), beta), options, used, [&](const Plan& plan, Backend& backend) {
    OperationSpec spec = elementwise_spec(plan, y, dy, nullptr, dx, beta);
    spec.compute = [&backend, &p, mode, log](const Chunk& ch, const float* ys, const float* dys, const float*,
                                              float* dxs, double beta, void*) {
      backend.softmax_backward(chunk_of(chunk_extent(ch), p.spatial_dims), mode, log, ys, dys, dxs, p.alpha, beta);
    };
    return spec;
  }, stats);
}

void add_tensor(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& c_shape, double alpha, const float* a,
                double beta, const float* c, float* out, const Options& options, Plan* used, RunStats* stats) {
  require(a && c && out, "add_tensor");
  const bool in_place = out == c;
  const LayerPlanSpec ls = add_spec(a_shape, c_shape, in_place, beta);
  ConvProblem p = layer_problem(Operation::add_tensor, c_shape);
  p.alpha = alpha;
  p.beta = beta;
  plan_and_run(p, ls, options, used, [&](const Plan& plan, Backend& backend) {
    // Streamed as a: the broadcast tensor, one box per chunk (1 along its broadcast dims); b: c,
    // unless out is c, which the pipeline then loads itself (scaled by beta).
    const Extent a_ext = extent_of(a_shape);
    const TensorView av = TensorView::contiguous(a, a_ext, 5, dtype_size(p.dtype));
    OperationSpec spec = elementwise_spec(plan, c, nullptr, nullptr, out);
    spec.a = {a, plan.w_buffers, plan.w_slot_bytes};
    spec.a_region = [av, full = ls.broadcast_full](const Chunk& ch) {
      Box b = chunk_box(ch);
      for (int d = 0; d < 5; ++d)
        if (!full[d]) b.lo[d] = 0, b.hi[d] = 1;
      return Region{av, b};
    };
    const bool separate = !in_place;
    if (separate) {
      const Streamed sc = streamed(plan, c, plan.buffers, plan.x_slot_bytes);
      spec.b = sc.tensor;
      spec.b_region = sc.region;
    }
    spec.beta = separate ? 0.0 : beta;
    spec.compute = [&backend, &p, full = ls.broadcast_full, separate, alpha, beta](
                       const Chunk& ch, const float* as, const float* cs, const float*, float* outs, double, void*) {
      Extent box = chunk_extent(ch), abox = box;
      for (int d = 0; d < 5; ++d)
        if (!full[d]) abox[d] = 1;
      backend.add_tensor(chunk_of(abox, p.spatial_dims), chunk_of(box, p.spatial_dims), alpha, as, beta,
                         separate ? cs : nullptr, outs);
    };
    return spec;
  }, stats);
}

}  // namespace ooc
