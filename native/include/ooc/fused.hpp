// Fused out-of-core functions (ooc_cuDNN's fused layers): several operations in one pass over the
// chunks, with the intermediates kept on the device. On a link-bound GPU the fastest byte is the one
// never moved: each function moves what its unfused composition reads and writes once, not once per
// operation. Same contract as ooc.hpp: host pointers, Options::memory_limit, the Plan that ran (its
// `fused` names the function; bytes_h2d / bytes_d2h the traffic) and RunStats of what moved.
// Every tensor has the problem's dtype (float32, float16, bfloat16), z, bias and the results
// included. The backward fusions keep dw and db on the device in float32 whatever the dtype (the
// caller's half dw and db are converted once, at the end); the dx rows two spatial tiles share are
// carried in the tensors' dtype.
#pragma once

#include <string>
#include <vector>

#include "ooc/ooc.hpp"
#include "ooc/pool_activation_softmax.hpp"

namespace ooc {

// "identity" or a name activation_mode_from_name accepts; invalid_argument listing them otherwise.
FusedActivation fused_activation_from_name(const std::string& name, double coef);

// y = act(alpha1 * conv(x, w) + alpha2 * z + bias) (cuDNN's ConvolutionBiasActivationForward): the
// composition conv_forward(x, w, alpha = alpha1) -> add_tensor(z, alpha2) -> add_tensor(bias) ->
// activation_forward, in one pass. `problem` is ConvProblem::forward with alpha = alpha1, beta =
// alpha2 and has_bias; it is planned exactly as conv_forward plans it: the reduction's first chunk
// loads its y tile from z (when alpha2 != 0; z is never read otherwise and may be null), the last adds
// bias and applies the activation on the device, and only the finished y crosses back. z may be y
// (in place); bias may be null when !problem.has_bias.
Plan plan_conv_bias_activation_forward(const ConvProblem& problem, const Options& options);
void conv_bias_activation_forward(const ConvProblem& problem, const FusedActivation& activation, const void* x,
                                  const void* w, const void* z, const void* bias, void* y, const Options& options,
                                  Plan* used = nullptr, RunStats* stats = nullptr);

// out = pool(act(alpha1 * conv(x, w) + alpha2 * z + bias)): conv_bias_activation_forward followed by
// pool_forward, in one pass over the chunks; y never leaves the device. `pool` is
// pool_problem(conv.y_shape(), kernel, stride, padding) (invalid_argument when its x is not conv's
// y); out has its y's shape. The output tiles are tiles of out, each computing the y rows its
// windows need (fused_planner.hpp): no window straddles two chunks. z as for
// conv_bias_activation_forward (y-shaped).
Plan plan_conv_bias_activation_pooling_forward(const ConvProblem& conv, const ConvProblem& pool,
                                               const Options& options);
void conv_bias_activation_pooling_forward(const ConvProblem& conv, const FusedActivation& activation,
                                          const ConvProblem& pool, PoolMode mode, const void* x, const void* w,
                                          const void* z, const void* bias, void* out, const Options& options,
                                          Plan* used = nullptr, RunStats* stats = nullptr);

// y = act(alpha1 * conv_transpose(x, w) + alpha2 * z + bias): a transposed convolution (torch's
// conv_transpose{1,2,3}d; cuDNN's BackwardData run as a forward op) with bias and activation, in one
// pass: the backward-data planner's chunks, each finished dx tile getting bias and activation on
// the device. x: [n, c_in, in...], w: [c_in, c_out, kernel...] (torch's layout), bias: [c_out],
// y: [n, c_out, out...] with out = (in - 1) * stride - 2 * padding + dilation * (kernel - 1) +
// output_padding + 1. deconv_problem validates (naming x, w, output_padding) and gives the
// ConvProblem::backward_data problem it is (dy = x, dx = y; alpha = alpha1, beta = alpha2).
ConvProblem deconv_problem(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                           const std::vector<int64_t>& output_padding, const std::vector<int64_t>& dilation,
                           int64_t groups, double alpha1, double alpha2, bool has_bias,
                           DType dtype = DType::float32);
Plan plan_deconv_bias_activation_forward(const ConvProblem& deconv, const Options& options);
void deconv_bias_activation_forward(const ConvProblem& deconv, const FusedActivation& activation, const void* x,
                                    const void* w, const void* z, const void* bias, void* y,
                                    const Options& options, Plan* used = nullptr, RunStats* stats = nullptr);

// (dx, dw, db) = (conv_backward_data(dy, w), conv_backward_filter(x, dy), conv_backward_bias(dy)),
// each scaled by problem.alpha, from one pass over dy: dy crosses the link once instead of three
// times (plan/fused_planner.hpp says how the dy tile serves all three). `problem` is
// ConvProblem::backward_data (dy_shape, w_shape, x_shape, geometry) with beta == 0: the gradients
// are fresh (invalid_argument otherwise). dx like x, dw like w, db [k]; none may alias an input.
Plan plan_conv_backward_data_filter_bias(const ConvProblem& problem, const Options& options);
void conv_backward_data_filter_bias(const ConvProblem& problem, const void* x, const void* dy, const void* w,
                                    void* dx, void* dw, void* db, const Options& options, Plan* used = nullptr,
                                    RunStats* stats = nullptr);

// The same with the activation's backward folded in: for y = act(pre) (pre = conv(x, w) + bias,
// as conv_bias_activation_forward computes it), dz = activation_backward(y, dy, pre) is formed on
// the device from each dy tile and never leaves it; (dx, dw, db) are the gradients of dz (the
// composition activation_backward -> conv_backward_data, _filter, _bias). y and dy are y-shaped;
// pre may be null for relu, sigmoid and tanh, whose gradients y alone gives (invalid_argument for
// clipped_relu, elu and swish without it). Identity folds nothing in: y and pre unused.
// with_pre: plan for a call given pre (one more y-shaped tensor per dy tile).
Plan plan_activation_conv_backward_data_filter_bias(const ConvProblem& problem, const FusedActivation& activation,
                                                    bool with_pre, const Options& options);
void activation_conv_backward_data_filter_bias(const ConvProblem& problem, const FusedActivation& activation,
                                               const void* x, const void* dy, const void* w, const void* y,
                                               const void* pre, void* dx, void* dw, void* db,
                                               const Options& options, Plan* used = nullptr, RunStats* stats = nullptr);

// And with a pooling's backward folded in too: for q = pool(y), y = act(pre) (conv_bias_activation_
// pooling_forward's chain), dy = pool_backward(q, dq, y) and dz = act'(pre) * dy are formed on the
// device per dy tile; (dx, dw, db) are dz's gradients. The composition pool_backward ->
// activation_backward -> conv_backward_data_filter_bias. dq and q are pooled-shaped (pool's
// output), y and pre y-shaped; pool = pool_problem(problem's dy shape, ...). Each tile loads dq and
// q over the pooled rows reaching it and y (pre) over their windows (fused_planner.hpp's
// pooled_rows); dimensions the pooling pads stay whole. pre as for
// activation_conv_backward_data_filter_bias (identity: y is still read, as pooling's input).
Plan plan_pooling_activation_conv_backward_data_filter_bias(const ConvProblem& problem,
                                                            const FusedActivation& activation,
                                                            const ConvProblem& pool, bool with_pre,
                                                            const Options& options);
void pooling_activation_conv_backward_data_filter_bias(const ConvProblem& problem, const FusedActivation& activation,
                                                       const ConvProblem& pool, PoolMode mode, const void* x,
                                                       const void* dq, const void* w, const void* q,
                                                       const void* y, const void* pre, void* dx, void* dw,
                                                       void* db, const Options& options, Plan* used = nullptr,
                                                       RunStats* stats = nullptr);

}  // namespace ooc
