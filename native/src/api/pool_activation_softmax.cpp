// The layers of layers.hpp: problem checks, plans (plan/layer_planner) and the pipeline specs
// that stream their chunks (exec/chunk_pipeline) through the backend's layer kernels.
#include "ooc/layers.hpp"

#include <sstream>

#include "api/run_operation.hpp"
#include "backend/activation_formulas.hpp"
#include "exec/pool_activation_softmax_pipeline.hpp"
#include "util/thread_pool.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/checked_size.hpp"
#include "plan/layer_planner.hpp"
#include "plan/shape_format.hpp"

namespace ooc {
namespace {

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

using Run = std::function<RunStats(const Plan&, Backend&)>;

// The call of a layer planned by plan_layer: the spec is a planner input, so it is part of the key.
OperationCall layer_call(const ConvProblem& p, const LayerPlanSpec& ls, std::vector<const void*> tensors, Run run) {
  PlanKey key("layer");
  key.add(p).add(ls.full_inputs).add(ls.reads_output).add(ls.has_broadcast);
  for (int d = 0; d < 5; ++d) key.add(ls.splittable[d]).add(ls.broadcast_full[d]);
  return spreading({std::move(key), [&p, ls](const PlannerConfig& c) { return plan_layer(p, ls, c); },
                    std::move(tensors), std::move(run)});  // every chunk writes its own output tile
}

OperationCall pool_call(const ConvProblem& p, std::vector<const void*> tensors, Run run) {
  const bool forward = p.op == Operation::pool_forward;
  return spreading({PlanKey("pool").add(p),  // every chunk writes its own output tile
                    [&p, forward](const PlannerConfig& c) { return forward ? plan_pool(p, c) : plan_pool_backward_for(p, c); },
                    std::move(tensors), std::move(run)});
}

// The problem of a layer that blends its result into the output: out = alpha * result + beta * out.
ConvProblem blended_problem(Operation op, const std::vector<int64_t>& shape, double alpha, double beta,
                            DType dtype = DType::float32) {
  ConvProblem p = layer_problem(op, shape);
  p.alpha = alpha;
  p.beta = beta;
  p.dtype = dtype;
  return p;
}

LayerPlanSpec blended_spec(LayerPlanSpec ls, double beta) {
  ls.reads_output = beta != 0.0;
  return ls;
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

#define OOC_ACTIVATION_NAME(name) #name,
constexpr std::array kActivationNames{OOC_ACTIVATION_MODES(OOC_ACTIVATION_NAME)};
#undef OOC_ACTIVATION_NAME

const char* activation_mode_name(ActivationMode mode) { return kActivationNames.at(static_cast<size_t>(mode)); }

ActivationTraits activation_traits(ActivationMode mode) { return activation_traits_of(mode); }

ActivationMode activation_mode_from_name(const std::string& name) {
  return mode_from_name<ActivationMode>(name, "activation mode", kActivationNames);
}

PoolMode pool_mode_from_name(const std::string& name) {
  return mode_from_name<PoolMode>(name, "pooling mode", std::array<const char*, 3>{"max", "avg", "avg_exclude_pad"});
}

ConvProblem pool_problem(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
                         const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, DType dtype) {
  ConvProblem p = layer_problem(Operation::pool_forward, x_shape);
  p.dtype = dtype;
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
    checked::kernel_int(p.kernel[d], "kernel");
    checked::kernel_int(p.stride[d], "stride");
    if (p.padding[d] > p.kernel[d] / 2)  // 2 * padding > kernel, without overflowing
      throw invalid_argument("padding: pad should be at most half of effective kernel size, but got pad=" +
                             std::to_string(p.padding[d]) + ", kernel_size=" + std::to_string(p.kernel[d]) +
                             " (dimension " + std::to_string(d) + ")");
    checked::add(p.in[d], checked::mul(2, p.padding[d], "padding"), "the padded input");
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
  return plan_operation(pool_call(problem, {}, {}), options);
}

void pool_forward(const ConvProblem& p, PoolMode mode, const void* x, void* y, const Options& options, Plan* used,
                  RunStats* stats) {
  require_data({x, y}, "pool_forward");
  if (p.op != Operation::pool_forward) throw invalid_argument("pool_forward: not a pooling problem");
  run_operation(pool_call(p, {x, y},
                          [&](const Plan& plan, Backend& backend) {
                            return run_pool_forward(plan, backend, mode, x, y, ThreadPool::shared());
                          }),
                options, used, stats);
}

ConvProblem pool_backward_problem(const ConvProblem& forward) {
  if (forward.op != Operation::pool_forward) throw invalid_argument("pool_backward_problem: not a pooling problem");
  ConvProblem p = forward;
  p.op = Operation::pool_backward;
  return p;
}

Plan plan_pool_backward(const ConvProblem& problem, const Options& options) {
  if (problem.op != Operation::pool_backward) throw invalid_argument("plan_pool_backward: not a pool_backward problem");
  return plan_operation(pool_call(problem, {}, {}), options);
}

void pool_backward(const ConvProblem& p, PoolMode mode, const void* y, const void* dy, const void* x, void* dx,
                   const Options& options, Plan* used, RunStats* stats) {
  require_data({y, dy, x, dx}, "pool_backward");
  if (p.op != Operation::pool_backward) throw invalid_argument("pool_backward: not a pool_backward problem");
  run_operation(pool_call(p, {y, dy, x, dx},
                          [&](const Plan& plan, Backend& backend) {
                            return run_pool_backward(plan, backend, mode, y, dy, x, dx, ThreadPool::shared());
                          }),
                options, used, stats);
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
  checked::tensor_elements(shape, dtype_size(DType::float32), std::string(operation_name(op)) + ": the tensor");
  ConvProblem p;
  p.op = op;
  p.spatial_dims = static_cast<int>(shape.size()) - 2;
  p.n = shape[0];
  p.c = p.k = shape[1];
  for (int d = 0; d < p.spatial_dims; ++d) p.in[d] = p.out[d] = shape[2 + d];
  return p;
}

Plan plan_activation_forward(const std::vector<int64_t>& shape, const Options& options, DType dtype) {
  return plan_operation(
      layer_call(blended_problem(Operation::activation_forward, shape, 1.0, 0.0, dtype), LayerPlanSpec{}, {}, {}),
      options);
}

namespace {
// y and dy, and x only where the gradient needs it (a quarter less traffic for relu, sigmoid, tanh).
bool backward_reads_x(ActivationMode mode) { return !activation_traits(mode).gradient_from_y; }
LayerPlanSpec activation_backward_spec(ActivationMode mode) {
  LayerPlanSpec ls;
  ls.full_inputs = backward_reads_x(mode) ? 3 : 2;
  return ls;
}
}  // namespace

Plan plan_activation_backward(const std::vector<int64_t>& shape, ActivationMode mode, const Options& options,
                              DType dtype) {
  return plan_operation(layer_call(blended_problem(Operation::activation_backward, shape, 1.0, 0.0, dtype),
                                   activation_backward_spec(mode), {}, {}),
                        options);
}

Plan plan_softmax_forward(const std::vector<int64_t>& shape, SoftmaxMode mode, const Options& options, DType dtype) {
  return plan_operation(layer_call(blended_problem(Operation::softmax_forward, shape, 1.0, 0.0, dtype),
                                   softmax_spec(mode, 1), {}, {}),
                        options);
}

Plan plan_softmax_backward(const std::vector<int64_t>& shape, SoftmaxMode mode, const Options& options,
                           DType dtype) {
  return plan_operation(layer_call(blended_problem(Operation::softmax_backward, shape, 1.0, 0.0, dtype),
                                   softmax_spec(mode, 2), {}, {}),
                        options);
}

Plan plan_add_tensor(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& c_shape, bool in_place,
                     const Options& options, DType dtype) {
  const LayerPlanSpec ls = add_spec(a_shape, c_shape, in_place, 1.0);
  return plan_operation(layer_call(blended_problem(Operation::add_tensor, c_shape, 1.0, 0.0, dtype), ls, {}, {}),
                        options);
}

void activation_forward(const std::vector<int64_t>& shape, ActivationMode mode, double coef, const void* x, void* y,
                        const Options& options, Plan* used, RunStats* stats, double alpha, double beta,
                        DType dtype) {
  require_data({x, y}, "activation_forward");
  const ConvProblem p = blended_problem(Operation::activation_forward, shape, alpha, beta, dtype);
  run_operation(layer_call(p, blended_spec(LayerPlanSpec{}, beta), {x, y},
                           [&](const Plan& plan, Backend& backend) {
                             return run_activation_forward(plan, backend, mode, coef, x, y, ThreadPool::shared());
                           }),
                options, used, stats);
}

void activation_backward(const std::vector<int64_t>& shape, ActivationMode mode, double coef, const void* y,
                         const void* dy, const void* x, void* dx, const Options& options, Plan* used,
                         RunStats* stats, double alpha, double beta, DType dtype) {
  require_data({y, dy, x, dx}, "activation_backward");
  const ConvProblem p = blended_problem(Operation::activation_backward, shape, alpha, beta, dtype);
  const void* read_x = backward_reads_x(mode) ? x : nullptr;  // never touched otherwise
  run_operation(layer_call(p, blended_spec(activation_backward_spec(mode), beta), {y, dy, read_x, dx},
                           [&](const Plan& plan, Backend& backend) {
                             return run_activation_backward(plan, backend, mode, coef, y, dy, read_x, dx,
                                                            ThreadPool::shared());
                           }),
                options, used, stats);
}

void softmax_forward(const std::vector<int64_t>& shape, SoftmaxMode mode, bool log, const void* x, void* y,
                     const Options& options, Plan* used, RunStats* stats, double alpha, double beta, DType dtype) {
  require_data({x, y}, "softmax_forward");
  const ConvProblem p = blended_problem(Operation::softmax_forward, shape, alpha, beta, dtype);
  run_operation(layer_call(p, blended_spec(softmax_spec(mode, 1), beta), {x, y},
                           [&](const Plan& plan, Backend& backend) {
                             return run_softmax_forward(plan, backend, mode, log, x, y, ThreadPool::shared());
                           }),
                options, used, stats);
}

void softmax_backward(const std::vector<int64_t>& shape, SoftmaxMode mode, bool log, const void* y, const void* dy,
                      void* dx, const Options& options, Plan* used, RunStats* stats, double alpha, double beta,
                      DType dtype) {
  require_data({y, dy, dx}, "softmax_backward");
  const ConvProblem p = blended_problem(Operation::softmax_backward, shape, alpha, beta, dtype);
  run_operation(layer_call(p, blended_spec(softmax_spec(mode, 2), beta), {y, dy, dx},
                           [&](const Plan& plan, Backend& backend) {
                             return run_softmax_backward(plan, backend, mode, log, y, dy, dx, ThreadPool::shared());
                           }),
                options, used, stats);
}

void add_tensor(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& c_shape, double alpha, const void* a,
                double beta, const void* c, void* out, const Options& options, Plan* used, RunStats* stats,
                DType dtype) {
  require_data({a, c, out}, "add_tensor");
  const LayerPlanSpec ls = add_spec(a_shape, c_shape, out == c, beta);
  const ConvProblem p = blended_problem(Operation::add_tensor, c_shape, alpha, beta, dtype);
  run_operation(layer_call(p, ls, {a, c, out},
                           [&](const Plan& plan, Backend& backend) {
                             return run_add_tensor(plan, backend, a_shape, ls.broadcast_full, a, c, out,
                                                   ThreadPool::shared());
                           }),
                options, used, stats);
}

}  // namespace ooc
