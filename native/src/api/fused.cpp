// The fused functions of fused.hpp: argument checks, plans, runs (exec/fused_pipeline).
#include "ooc/fused.hpp"

#include <algorithm>
#include <initializer_list>
#include <limits>

#include "api/float32_output.hpp"
#include "api/run_operation.hpp"
#include "exec/fused_pipeline.hpp"
#include "util/thread_pool.hpp"
#include "plan/checked_size.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/fused_planner.hpp"
#include "plan/planner.hpp"
#include "plan/planner_parts.hpp"
#include "plan/shape_format.hpp"

namespace ooc {
namespace {

using Run = std::function<RunStats(const Plan&, Backend&)>;

PlanKey& add_activation(PlanKey& key, const FusedActivation& a, bool with_pre) {
  return key.add(a.identity).add(a.mode).add(a.coef).add(with_pre);
}

// The fused pipelines stream channels-first tensors only so far (docs/layouts.md).
void require_channels_first(const ConvProblem& p, const char* function) {
  if (p.layout != Layout::channels_first)
    throw not_supported(std::string(function) + ": channels_last tensors are not supported yet (run the separate "
                        "convolution and layer calls, or pass channels-first tensors)");
}

void require_forward(const ConvProblem& p, const char* function) {
  require_channels_first(p, function);
  if (p.op != Operation::forward)
    throw invalid_argument(std::string(function) + ": the problem describes " + operation_name(p.op) +
                           " (make it with ConvProblem::forward)");
}

Plan plan_bias_activation(const ConvProblem& p, const PlannerConfig& config) {
  Plan plan = plan_conv_forward_for(p, config);
  plan.fused = "conv_bias_activation_forward";
  return plan;
}

void require_deconv(const ConvProblem& p, const char* function) {
  require_channels_first(p, function);
  if (p.op != Operation::backward_data)
    throw invalid_argument(std::string(function) + ": the problem describes " + operation_name(p.op) +
                           " (make it with deconv_problem)");
}

void require_backward(const ConvProblem& p, const char* function) {
  require_channels_first(p, function);
  if (p.op != Operation::backward_data)
    throw invalid_argument(std::string(function) + ": the problem describes " + operation_name(p.op) +
                           " (make it with ConvProblem::backward_data)");
  if (p.beta != 0.0)
    throw invalid_argument(std::string(function) + ": beta must be 0 (the gradients are computed fresh), got " +
                           std::to_string(p.beta));
}

// How many y-shaped tensors a fused activation backward streams per dy tile: dy, y and, where the
// gradient needs it, the activation's input.
int activation_y_inputs(const FusedActivation& a, bool with_pre) {
  if (a.identity) return 1;
  // (activation_formulas.hpp says which gradients follow from y alone; relu's mask is y > 0 as well.)
  if (!activation_traits(a.mode).gradient_from_y && !with_pre) {
    throw invalid_argument(std::string("pre (the activation's input) is needed for the gradient of ") +
                           activation_mode_name(a.mode) + ": y alone does not give it");
  }
  return with_pre ? 3 : 2;
}

// Runs `run(float* dw, float* db)` on float32 views of the caller's dw and db: the fused backwards
// keep both on the device in float32 (kKeptDtype) across every dy tile; a half call's are
// converted to its dtype at the end.
template <typename Run>
void with_float32_gradients(const ConvProblem& p, void* dw, void* db, Run run) {
  with_float32_output(p, dw, p.w_elements(), [&](float* dw32) {
    with_float32_output(p, db, p.k, [&](float* db32) { run(dw32, db32); });
  });
}

Plan plan_activation_backward(const ConvProblem& p, const FusedActivation& a, bool with_pre,
                              const PlannerConfig& config) {
  return plan_conv_backward_data_filter_bias_for(p, config, activation_y_inputs(a, with_pre),
                                                 "activation_conv_backward_data_filter_bias");
}

}  // namespace

FusedActivation fused_activation_from_name(const std::string& name, double coef) {
  FusedActivation a;
  a.coef = coef;
  if (name == "identity") {
    a.identity = true;
    return a;
  }
  try {
    a.mode = activation_mode_from_name(name);
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string("activation: 'identity' or ") + e.what());
  }
  return a;
}

namespace {

// Each fused function's call (run_operation.hpp): its key and planner written once, for the plan_*
// twin (no tensors, no run) and the run alike.
OperationCall bias_activation_call(const ConvProblem& p, std::vector<const void*> tensors = {}, Run run = {}) {
  // The forward convolution's chunks, each y tile activated where it is completed.
  return spreading({PlanKey("conv_bias_activation_forward").add(p),
                    [&p](const PlannerConfig& c) { return plan_bias_activation(p, c); }, std::move(tensors),
                    std::move(run)});
}

}  // namespace

Plan plan_conv_bias_activation_forward(const ConvProblem& problem, const Options& options) {
  require_forward(problem, "plan_conv_bias_activation_forward");
  return plan_operation(bias_activation_call(problem), options);
}

void conv_bias_activation_forward(const ConvProblem& problem, const FusedActivation& activation, const void* x,
                                  const void* w, const void* z, const void* bias, void* y, const Options& options,
                                  Plan* used, RunStats* stats) {
  require_forward(problem, "conv_bias_activation_forward");
  if (!x || !w || !y || (problem.has_bias && !bias) || (problem.beta != 0.0 && !z))
    throw invalid_argument("conv_bias_activation_forward: null data pointer");
  const void* z_read = problem.beta != 0.0 ? z : nullptr;
  run_operation(bias_activation_call(problem, {x, w, z_read, bias, y},
                                     [&](const Plan& plan, Backend& backend) {
                                       return run_conv_bias_activation_forward(plan, backend, activation, x, w, z,
                                                                               bias, y, ThreadPool::shared());
                                     }),
                options, used, stats);
}

namespace {

void require_pooling_of(const ConvProblem& conv, const ConvProblem& pool, const char* function) {
  require_forward(conv, function);
  require_channels_first(pool, function);
  if (pool.op != Operation::pool_forward)
    throw invalid_argument(std::string(function) + ": pool describes " + operation_name(pool.op) +
                           " (make it with pool_problem)");
  if (pool.x_shape() != conv.y_shape())
    throw invalid_argument(std::string(function) + ": pool pools a tensor of another shape than the convolution's y");
}

OperationCall pooling_forward_call(const ConvProblem& conv, const ConvProblem& pool,
                                   std::vector<const void*> tensors = {}, Run run = {}) {
  return {PlanKey("conv_bias_activation_pooling_forward").add(conv).add(pool),
          [&conv, &pool](const PlannerConfig& c) {
            return plan_conv_bias_activation_pooling_forward_for(conv, pool, c);
          },
          std::move(tensors), std::move(run)};
}

}  // namespace

Plan plan_conv_bias_activation_pooling_forward(const ConvProblem& conv, const ConvProblem& pool,
                                               const Options& options) {
  require_pooling_of(conv, pool, "plan_conv_bias_activation_pooling_forward");
  return plan_operation(pooling_forward_call(conv, pool), options);
}

void conv_bias_activation_pooling_forward(const ConvProblem& conv, const FusedActivation& activation,
                                          const ConvProblem& pool, PoolMode mode, const void* x, const void* w,
                                          const void* z, const void* bias, void* out, const Options& options,
                                          Plan* used, RunStats* stats) {
  require_pooling_of(conv, pool, "conv_bias_activation_pooling_forward");
  if (!x || !w || !out || (conv.has_bias && !bias) || (conv.beta != 0.0 && !z))
    throw invalid_argument("conv_bias_activation_pooling_forward: null data pointer");
  const void* z_read = conv.beta != 0.0 ? z : nullptr;
  run_operation(pooling_forward_call(conv, pool, {x, w, z_read, bias, out},
                                     [&](const Plan& plan, Backend& backend) {
                                       return run_conv_bias_activation_pooling_forward(
                                           plan, backend, activation, pool, mode, x, w, z, bias, out,
                                           ThreadPool::shared());
                                     }),
                options, used, stats);
}

ConvProblem deconv_problem(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                           const std::vector<int64_t>& output_padding, const std::vector<int64_t>& dilation,
                           int64_t groups, double alpha1, double alpha2, bool has_bias, DType dtype) {
  if (w_shape.size() < 3 || w_shape.size() > 5 || x_shape.size() != w_shape.size())
    throw invalid_argument("x and w must both be 3D, 4D or 5D ([batch, in_channels, *spatial] and [in_channels, "
                           "out_channels/groups, *kernel]), got x" + format_shape(x_shape) + " and w" +
                           format_shape(w_shape));
  if (x_shape[1] != w_shape[0])
    throw invalid_argument("x has " + std::to_string(x_shape[1]) + " channels, w" + format_shape(w_shape) +
                           " expects " + std::to_string(w_shape[0]) + " (w is [in_channels, out_channels, ...])");
  checked::tensor_elements(x_shape, dtype_size(dtype), "x");
  checked::tensor_elements(w_shape, dtype_size(dtype), "w");
  const size_t sd = w_shape.size() - 2;
  auto option = [&](const std::vector<int64_t>& v, const char* name, size_t d) {
    if (v.size() != 1 && v.size() != sd)
      throw invalid_argument(std::string(name) + " must have 1 or " + std::to_string(sd) + " elements, got " +
                             std::to_string(v.size()));
    return v.size() == 1 ? v[0] : v[d];
  };
  std::vector<int64_t> y_shape{x_shape[0], w_shape[1] * groups};
  for (size_t d = 0; d < sd; ++d) {
    const int64_t s = option(stride, "stride", d), pad = option(padding, "padding", d);
    const int64_t op = option(output_padding, "output_padding", d), dil = option(dilation, "dilation", d);
    // An output_padding of stride or more would add rows no conv_forward of y maps back to x.
    if (op < 0 || op >= s)
      throw invalid_argument("output_padding must be non-negative and smaller than stride, got output_padding=" +
                             std::to_string(op) + " and stride=" + std::to_string(s) + " (dimension " +
                             std::to_string(d) + ")");
    // (x - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1, checked.
    int64_t out = checked::mul(x_shape[2 + d] - 1, s, "stride");
    out = checked::add(out, checked::mul(dil, w_shape[2 + d] - 1, "dilation"), "the output");
    out = checked::add(out, checked::add(op, 1, "output_padding"), "the output");
    out = checked::add(out, -checked::mul(2, pad, "padding"), "the output");
    if (out <= 0)
      throw invalid_argument("the transposed convolution's output would be empty: " + std::to_string(out) +
                             " rows along dimension " + std::to_string(d) + " of x" + format_shape(x_shape));
    y_shape.push_back(out);
  }
  ConvProblem p = ConvProblem::backward_data(x_shape, w_shape, y_shape, stride, padding, dilation, groups, alpha1,
                                             alpha2, dtype);
  p.has_bias = has_bias;
  return p;
}

namespace {

// The backward-data planner's plan with the bias (per output channel, resident) added to it.
Plan plan_deconv(const ConvProblem& p, const PlannerConfig& config) {
  const size_t bias = p.has_bias ? planner_parts::slot_bytes(p.c, static_cast<double>(dtype_size(p.dtype))) : 0;
  PlannerConfig rest = config;
  rest.memory_limit = config.memory_limit > bias ? config.memory_limit - bias : 0;
  Plan plan;
  try {
    plan = plan_conv_backward_for(p, rest);
  } catch (const out_of_budget& e) {
    planner_parts::throw_out_of_budget(p, config.memory_limit, e.needed_bytes() + bias, config.workspace_bytes != 0);
  }
  plan.fused = "deconv_bias_activation_forward";
  plan.memory_limit = config.memory_limit;
  plan.peak_device_bytes += bias;
  if (bias) plan.slots.push_back({"bias", SlotKind::streamed, 1, bias, 0});  // resident for the whole run
  plan.bias_buffers = p.has_bias ? 1 : 0;
  plan.bias_bytes = bias;
  plan.bytes_h2d += p.has_bias ? static_cast<size_t>(p.c) * dtype_size(p.dtype) : 0;
  return plan;
}

OperationCall deconv_call(const ConvProblem& p, std::vector<const void*> tensors = {}, Run run = {}) {
  // Backward data's chunks: each output tile is one reduction group's.
  return spreading({PlanKey("deconv_bias_activation_forward").add(p),
                    [&p](const PlannerConfig& c) { return plan_deconv(p, c); }, std::move(tensors), std::move(run)});
}

OperationCall backward_call(const ConvProblem& p, std::vector<const void*> tensors = {}, Run run = {}) {
  return {PlanKey("conv_backward_data_filter_bias").add(p),
          [&p](const PlannerConfig& c) { return plan_conv_backward_data_filter_bias_for(p, c); }, std::move(tensors),
          std::move(run)};
}

OperationCall activation_backward_call(const ConvProblem& p, const FusedActivation& a, bool with_pre,
                                       std::vector<const void*> tensors = {}, Run run = {}) {
  PlanKey key("activation_conv_backward_data_filter_bias");
  return {std::move(add_activation(key.add(p), a, with_pre)),
          [&p, &a, with_pre](const PlannerConfig& c) { return plan_activation_backward(p, a, with_pre, c); },
          std::move(tensors), std::move(run)};
}

}  // namespace

Plan plan_deconv_bias_activation_forward(const ConvProblem& deconv, const Options& options) {
  require_deconv(deconv, "plan_deconv_bias_activation_forward");
  return plan_operation(deconv_call(deconv), options);
}

void deconv_bias_activation_forward(const ConvProblem& deconv, const FusedActivation& activation, const void* x,
                                    const void* w, const void* z, const void* bias, void* y,
                                    const Options& options, Plan* used, RunStats* stats) {
  require_deconv(deconv, "deconv_bias_activation_forward");
  if (!x || !w || !y || (deconv.has_bias && !bias) || (deconv.beta != 0.0 && !z))
    throw invalid_argument("deconv_bias_activation_forward: null data pointer");
  const void* z_read = deconv.beta != 0.0 ? z : nullptr;
  run_operation(deconv_call(deconv, {x, w, z_read, bias, y},
                            [&](const Plan& plan, Backend& backend) {
                              return run_deconv_bias_activation_forward(plan, backend, activation, x, w, z, bias, y,
                                                                        ThreadPool::shared());
                            }),
                options, used, stats);
}

Plan plan_conv_backward_data_filter_bias(const ConvProblem& problem, const Options& options) {
  require_backward(problem, "plan_conv_backward_data_filter_bias");
  return plan_operation(backward_call(problem), options);
}

void conv_backward_data_filter_bias(const ConvProblem& problem, const void* x, const void* dy, const void* w,
                                    void* dx, void* dw, void* db, const Options& options, Plan* used,
                                    RunStats* stats) {
  require_backward(problem, "conv_backward_data_filter_bias");
  if (!x || !dy || !w || !dx || !dw || !db) throw invalid_argument("conv_backward_data_filter_bias: null data pointer");
  with_float32_gradients(problem, dw, db, [&](float* dw32, float* db32) {
    run_operation(backward_call(problem, {x, dy, w, dx, dw32, db32},
                                [&](const Plan& plan, Backend& backend) {
                                  return run_conv_backward_data_filter_bias(plan, backend, x, dy, w, dx, dw32, db32,
                                                                            ThreadPool::shared());
                                }),
                  options, used, stats);
  });
}

Plan plan_activation_conv_backward_data_filter_bias(const ConvProblem& problem, const FusedActivation& activation,
                                                    bool with_pre, const Options& options) {
  require_backward(problem, "plan_activation_conv_backward_data_filter_bias");
  return plan_operation(activation_backward_call(problem, activation, with_pre), options);
}

void activation_conv_backward_data_filter_bias(const ConvProblem& problem, const FusedActivation& activation,
                                               const void* x, const void* dy, const void* w, const void* y,
                                               const void* pre, void* dx, void* dw, void* db,
                                               const Options& options, Plan* used, RunStats* stats) {
  require_backward(problem, "activation_conv_backward_data_filter_bias");
  if (!x || !dy || !w || !dx || !dw || !db || (!activation.identity && !y))
    throw invalid_argument("activation_conv_backward_data_filter_bias: null data pointer");
  const bool with_pre = pre && !activation.identity;
  with_float32_gradients(problem, dw, db, [&](float* dw32, float* db32) {
    run_operation(activation_backward_call(
        problem, activation, with_pre,
        {x, dy, w, activation.identity ? nullptr : y, with_pre ? pre : nullptr, dx, dw32, db32},
        [&](const Plan& plan, Backend& backend) {
          if (activation.identity)
            return run_conv_backward_data_filter_bias(plan, backend, x, dy, w, dx, dw32, db32, ThreadPool::shared());
          return run_activation_conv_backward_data_filter_bias(plan, backend, activation, x, dy, w, y,
                                                               with_pre ? pre : nullptr, dx, dw32, db32,
                                                               ThreadPool::shared());
        }),
        options, used, stats);
  });
}

namespace {

// The fused backward's plan with the pooling folded in: y (and pre) and the pooled dq and q per tile.
Plan plan_pooling_backward(const ConvProblem& p, const FusedActivation& a, const ConvProblem& pool, bool with_pre,
                           const PlannerConfig& config) {
  const int y_inputs = activation_y_inputs(a, with_pre) - (a.identity ? 0 : 1);  // y, and pre where given
  return plan_conv_backward_data_filter_bias_for(p, config, y_inputs,
                                                 "pooling_activation_conv_backward_data_filter_bias", &pool);
}

void require_pooled_backward(const ConvProblem& p, const ConvProblem& pool, const char* function) {
  require_backward(p, function);
  require_channels_first(pool, function);
  if (pool.op != Operation::pool_forward)
    throw invalid_argument(std::string(function) + ": pool describes " + operation_name(pool.op) +
                           " (make it with pool_problem)");
  if (pool.x_shape() != p.y_shape())
    throw invalid_argument(std::string(function) + ": pool pools a tensor of another shape than the convolution's y");
}

OperationCall pooled_backward_call(const ConvProblem& p, const FusedActivation& a, const ConvProblem& pool,
                                   bool with_pre, std::vector<const void*> tensors = {}, Run run = {}) {
  PlanKey key("pooling_activation_conv_backward_data_filter_bias");
  return {std::move(add_activation(key.add(p).add(pool), a, with_pre)),
          [&p, &a, &pool, with_pre](const PlannerConfig& c) { return plan_pooling_backward(p, a, pool, with_pre, c); },
          std::move(tensors), std::move(run)};
}

}  // namespace

Plan plan_pooling_activation_conv_backward_data_filter_bias(const ConvProblem& problem,
                                                            const FusedActivation& activation,
                                                            const ConvProblem& pool, bool with_pre,
                                                            const Options& options) {
  require_pooled_backward(problem, pool, "plan_pooling_activation_conv_backward_data_filter_bias");
  const bool pre_used = with_pre && !activation.identity;
  return plan_operation(pooled_backward_call(problem, activation, pool, pre_used), options);
}

void pooling_activation_conv_backward_data_filter_bias(const ConvProblem& problem, const FusedActivation& activation,
                                                       const ConvProblem& pool, PoolMode mode, const void* x,
                                                       const void* dq, const void* w, const void* q, const void* y,
                                                       const void* pre, void* dx, void* dw, void* db,
                                                       const Options& options, Plan* used, RunStats* stats) {
  require_pooled_backward(problem, pool, "pooling_activation_conv_backward_data_filter_bias");
  if (!x || !dq || !w || !q || !y || !dx || !dw || !db)
    throw invalid_argument("pooling_activation_conv_backward_data_filter_bias: null data pointer");
  const bool with_pre = pre && !activation.identity;
  with_float32_gradients(problem, dw, db, [&](float* dw32, float* db32) {
    run_operation(pooled_backward_call(problem, activation, pool, with_pre,
                                       {x, dq, w, q, y, with_pre ? pre : nullptr, dx, dw32, db32},
                                       [&](const Plan& plan, Backend& backend) {
                                         return run_pooling_activation_conv_backward_data_filter_bias(
                                             plan, backend, activation, pool, mode, x, dq, w, q, y,
                                             with_pre ? pre : nullptr, dx, dw32, db32, ThreadPool::shared());
                                       }),
                  options, used, stats);
  });
}

}  // namespace ooc
