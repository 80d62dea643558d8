// End-to-end runs of the fused functions (fused.hpp) through the public API, judged against float64
// references composed from the unfused ones: fresh random inputs, NaN-poisoned outputs, every element
// written, inputs untouched, measured traffic equal to the plan's, budget held. Shared by the host
// and cuda tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backward_run.hpp"
#include "ooc/fused.hpp"

namespace ooc_test {

// act(v) in float64, as the host backend's reference loops define it.
inline double reference_activation(const ooc::FusedActivation& a, double v) {
  if (a.identity) return v;
  const auto sigmoid = [](double t) { return 1.0 / (1.0 + std::exp(-t)); };
  switch (a.mode) {
    case ooc::ActivationMode::relu: return v > 0 ? v : 0.0;
    case ooc::ActivationMode::sigmoid: return sigmoid(v);
    case ooc::ActivationMode::tanh: return std::tanh(v);
    case ooc::ActivationMode::clipped_relu: return std::min(std::max(v, 0.0), a.coef);
    case ooc::ActivationMode::elu: return v > 0 ? v : a.coef * std::expm1(v);
    case ooc::ActivationMode::swish: return v * sigmoid(a.coef * v);
    case ooc::ActivationMode::gelu: return 0.5 * v * std::erfc(-v / std::sqrt(2.0));
    case ooc::ActivationMode::leaky_relu: return v > 0 ? v : a.coef * v;
  }
  return v;
}

// The activations a fused forward offers, with the coefficients the tests use.
inline std::vector<std::pair<std::string, ooc::FusedActivation>> fused_activations() {
  std::vector<std::pair<std::string, ooc::FusedActivation>> v;
  for (const auto& [name, coef] : std::vector<std::pair<std::string, double>>{
           {"identity", 0}, {"relu", 0}, {"sigmoid", 0}, {"tanh", 0}, {"clipped_relu", 0.6}, {"elu", 1.3},
           {"swish", 0.8}, {"gelu", 0}, {"leaky_relu", 0.2}})
    v.emplace_back(name, ooc::fused_activation_from_name(name, coef));
  return v;
}

// The error of an activated result relative to the larger of its own norm and that of the values
// before the activation: the activations are about 1-Lipschitz, so fp32 rounding before them carries
// through at that scale, also where they saturate (sigmoid of -400 is 0 in fp32, 1e-174 in fp64).
inline double activation_error(const Comparison& c, const std::vector<double>& ref, const std::vector<double>& pre) {
  double ref_norm = 0, pre_norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ref_norm += ref[i] * ref[i];
    pre_norm += pre[i] * pre[i];
  }
  ref_norm = std::sqrt(ref_norm);
  const double scale = std::max(ref_norm, std::sqrt(pre_norm));
  return scale > 0 ? c.relative_error * (ref_norm > 0 ? ref_norm : 1.0) / scale : c.relative_error;
}

// y = act(alpha * conv(x, w) + beta * z + bias) for spec (alpha = alpha1, beta = alpha2; z is a
// tensor of its own, or y itself when z_is_y), checked. Returns what ran.
inline RunResult run_fused_forward_and_check(const ConvSpec& spec, const ooc::FusedActivation& activation,
                                             size_t memory_limit, ooc::BackendKind backend, unsigned seed,
                                             bool z_is_y = false, CallerMemory memory = CallerMemory::pageable,
                                             double tolerance = 1e-5) {
  const ooc::ConvProblem p = spec.problem();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (OOC_TEST_SEED to replay), " + p.describe() + ", memory_limit " +
               std::to_string(memory_limit) + (z_is_y ? ", z is y" : ""));
  std::mt19937 rng(seed);
  const auto [x, w, bias] = random_conv_inputs(p, rng, spec.input_mean);
  const auto z = random_vector(static_cast<size_t>(p.y_elements()), rng);
  const std::vector<float> poison(static_cast<size_t>(p.y_elements()), std::nanf(""));
  CallerCopy xc(x, memory), wc(w, memory), bc(bias, memory), zc(z, memory), yc(z_is_y ? z : poison, memory);
  RunResult r;
  const bool ran = completes("conv_bias_activation_forward", [&] {
    ooc::conv_bias_activation_forward(p, activation, xc.data(), wc.data(), z_is_y ? yc.data() : zc.data(),
                                      spec.bias ? bc.data() : nullptr, yc.data(),
                                      options_for(backend, memory_limit), &r.plan, &r.stats);
  });
  if (!ran) return r;
  const std::vector<double> pre = reference_conv(p, x, w, spec.bias ? &bias : nullptr, &z);
  std::vector<double> ref = pre;
  for (double& v : ref) v = reference_activation(activation, v);
  const Comparison c = compare(yc.contents(), ref);
  EXPECT_EQ(c.non_finite, 0) << "elements not written (NaN), first at " << c.first_bad << "\n" << r.plan.describe();
  EXPECT_LT(activation_error(c, ref, pre), tolerance) << r.plan.describe();
  EXPECT_EQ(xc.contents(), x) << "x was modified";
  EXPECT_EQ(wc.contents(), w) << "w was modified";
  EXPECT_EQ(bc.contents(), bias) << "bias was modified";
  if (!z_is_y) {
    EXPECT_EQ(zc.contents(), z) << "z was modified";
  }

  EXPECT_EQ(r.plan.fused, "conv_bias_activation_forward");
  // z crosses once (where alpha2 != 0), y once: exactly the plan's traffic.
  expect_run_as_planned(r.plan, r.stats, memory_limit, memory, direct_h2d_bytes);
  EXPECT_EQ(r.stats.bytes_d2h, static_cast<size_t>(p.y_elements()) * 4);
  check_plan(r.plan, true);
  return r;
}

// --------------------------------------------------------------------------------------------
// conv_backward_data_filter_bias

// What the fused runs whose plans do not itemize direct DMA measured against their plan: the
// budget held, an arena of the plan's peak, its D2H bytes, and its H2D bytes for pageable memory
// (at most those by direct DMA, which skips the halo zeros the plan counts).
inline void expect_run_within_plan(const ooc::Plan& plan, const ooc::RunStats& stats, CallerMemory memory) {
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  EXPECT_EQ(stats.device_bytes_reserved, plan.peak_device_bytes);
  EXPECT_EQ(stats.bytes_d2h, plan.bytes_d2h);
  if (memory == CallerMemory::pageable) {
    EXPECT_EQ(stats.bytes_h2d, plan.bytes_h2d);
  } else {
    EXPECT_LE(stats.bytes_h2d, plan.bytes_h2d);
  }
}

// The smallest budget any fused backward plan for `p` needs on `backend`.
inline size_t fused_backward_needed_bytes(const ooc::ConvProblem& p, ooc::BackendKind backend) {
  return needed_bytes_of(ooc::plan_conv_backward_data_filter_bias, p, backend);
}

// A budget at which plan_fn's plan of `p` satisfies `want`: from the smallest peak upward by 4%
// steps up to ~20x; 0 when none does.
template <typename PlanFn>
size_t budget_where(PlanFn plan_fn, const ooc::ConvProblem& p, ooc::BackendKind backend,
                    const std::function<bool(const ooc::Plan&)>& want) {
  const size_t needed = needed_bytes_of(plan_fn, p, backend);
  for (double f = 1.0; f < 20.0; f *= 1.04) {
    const size_t budget = static_cast<size_t>(static_cast<double>(needed) * f);
    if (want(plan_fn(p, options_for(backend, budget)))) return budget;
  }
  return 0;
}

// The same for the fused backward's plan.
inline size_t fused_backward_budget(const ooc::ConvProblem& p, ooc::BackendKind backend,
                                    const std::function<bool(const ooc::Plan&)>& want) {
  return budget_where(ooc::plan_conv_backward_data_filter_bias, p, backend, want);
}

// Everything a fused backward plan must satisfy: the loop order for n-tile { for dy tile { for
// c-tile } } with K whole, each dy tile loaded once by the first chunk that uses it and the dy tiles
// covering dy exactly once, the target rows covering dx exactly once, cuDNN's shapes consistent, at
// most one spatial dimension split, the budget held and the traffic what the chunks move.
inline void check_fused_backward_plan(const ooc::Plan& plan) {
  const ooc::ConvProblem& p = plan.problem;
  ASSERT_TRUE(plan.fused == "conv_backward_data_filter_bias" ||
              plan.fused == "activation_conv_backward_data_filter_bias")
      << plan.fused;
  ASSERT_EQ(p.op, ooc::Operation::backward_data);
  ASSERT_FALSE(plan.chunks.empty());
  EXPECT_EQ(static_cast<int64_t>(plan.chunks.size()),
            plan.splits_n * plan.splits_c * plan.splits_out[0] * plan.splits_out[1] * plan.splits_out[2]);
  EXPECT_EQ(plan.splits_k, 1);
  EXPECT_LE((plan.splits_out[0] > 1) + (plan.splits_out[1] > 1) + (plan.splits_out[2] > 1), 1);
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  EXPECT_EQ(plan.peak_device_bytes, plan.y_inputs * plan.y_buffers * plan.y_slot_bytes + plan.x_buffers * plan.x_slot_bytes +
                                        plan.w_buffers * plan.w_slot_bytes + plan.out_buffers * plan.out_slot_bytes +
                                        plan.kept_bytes + plan.scratch_bytes + plan.workspace_bytes);
  std::vector<int> dy_loaded(static_cast<size_t>(p.y_elements()), 0), dx_written(static_cast<size_t>(p.x_elements()), 0);
  size_t dy_bytes = 0, x_bytes = 0, w_bytes = 0;
  const ooc::Chunk* group = nullptr;  // the chunk that loaded the dy tile in use
  std::vector<int64_t> next_c;        // per dy tile: c-tiles must follow each other from 0 to C
  for (const ooc::Chunk& ch : plan.chunks) {
    EXPECT_EQ(ch.k, (ooc::Range{0, p.k}));
    EXPECT_TRUE(ch.first_c && ch.last_c);
    if (ch.load_y) {
      group = &ch;
      EXPECT_EQ(ch.c.begin, 0) << describe_chunk(ch);
      dy_bytes += static_cast<size_t>(ch.n.size() * p.k * product3(ch.out)) * 4;
      for_each_box_index(ch.n, ooc::Range{0, p.k}, ch.out, p.k, p.out, [&](size_t i) { ++dy_loaded[i]; });
    } else {
      ASSERT_NE(group, nullptr);
      EXPECT_TRUE(ch.n == group->n && ch.out == group->out) << "a chunk uses a dy tile it did not load";
      EXPECT_EQ(ch.c.begin, next_c.back()) << describe_chunk(ch);
    }
    if (ch.load_y) next_c.push_back(0);
    next_c.back() = ch.c.end;
    if (ch.load_x) x_bytes += static_cast<size_t>(ch.n.size() * ch.c.size() * product3(ch.in)) * 4;
    if (ch.load_w) w_bytes += static_cast<size_t>(p.k * ch.c.size() * p.kernel[0] * p.kernel[1] * p.kernel[2]) * 4;
    for (int d = 0; d < ooc::kMaxSpatial; ++d) {
      EXPECT_EQ(ch.out_read[d], ch.out[d]);
      if (ch.target[d].size() > 0) {  // (tiles reaching only rows past dx write nothing back)
        EXPECT_LE(ch.in[d].begin, ch.target[d].begin) << describe_chunk(ch);
        EXPECT_GE(ch.in[d].end, ch.target[d].end) << describe_chunk(ch);
      }
      EXPECT_EQ(cudnn_output_rows(ch.in[d].size(), p.kernel[d], p.stride[d], ch.compute_padding[d], p.dilation[d]),
                ch.out[d].size())
          << "cuDNN's dx and dy rows disagree along " << d << ": " << describe_chunk(ch);
      if (plan.splits_out[d] > 1) {
        EXPECT_EQ(ch.compute_padding[d], 0);
        EXPECT_EQ(ch.in[d].begin, ch.out[d].begin * p.stride[d] - p.padding[d]) << "dx starts where dy reaches";
      } else {
        EXPECT_EQ(ch.in[d], (ooc::Range{0, p.in[d]}));
        EXPECT_EQ(ch.compute_padding[d], p.padding[d]);
      }
    }
    for_each_box_index(ch.n, ch.c, ch.target, p.c, p.in, [&](size_t i) { ++dx_written[i]; });
  }
  for (int64_t c : next_c) EXPECT_EQ(c, p.c) << "a dy tile does not serve every c-tile";
  EXPECT_EQ(std::count(dy_loaded.begin(), dy_loaded.end(), 1), static_cast<int64_t>(dy_loaded.size()))
      << "dy must cross the link exactly once";
  EXPECT_EQ(std::count(dx_written.begin(), dx_written.end(), 1), static_cast<int64_t>(dx_written.size()))
      << "every dx element is written back exactly once";
  EXPECT_EQ(dy_bytes, static_cast<size_t>(p.y_elements()) * 4);
  EXPECT_EQ(plan.bytes_h2d, plan.y_inputs * dy_bytes + x_bytes + w_bytes);
  EXPECT_EQ(plan.bytes_d2h, static_cast<size_t>(p.x_elements() + p.w_elements() + p.k) * 4);
}

// H2D bytes of a run whose caller memory is DMA'd directly: only what lies inside the tensors.
inline size_t fused_backward_direct_h2d_bytes(const ooc::Plan& plan) {
  const ooc::ConvProblem& p = plan.problem;
  size_t bytes = 0;
  for (const ooc::Chunk& ch : plan.chunks) {
    int64_t x = ch.n.size() * ch.c.size();
    for (int d = 0; d < ooc::kMaxSpatial; ++d)
      x *= std::max<int64_t>(0, std::min(ch.in[d].end, p.in[d]) - std::max<int64_t>(ch.in[d].begin, 0));
    if (ch.load_x) bytes += static_cast<size_t>(x) * 4;
    if (ch.load_y) bytes += static_cast<size_t>(plan.y_inputs * ch.n.size() * p.k * product3(ch.out)) * 4;
    if (ch.load_w) bytes += static_cast<size_t>(p.k * ch.c.size() * p.kernel[0] * p.kernel[1] * p.kernel[2]) * 4;
  }
  return bytes;
}

// Every output written, and (dx, dw, db) the float64 gradients of p's convolution for dz.
inline void expect_three_gradients(const ooc::ConvProblem& p, const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& dz, const std::vector<float>& dx,
                                   const std::vector<float>& dw, const std::vector<float>& db, double tolerance,
                                   const ooc::Plan& plan) {
  const std::vector<float> none;
  const std::pair<const char*, Comparison> results[] = {{"dx", compare(dx, reference_backward_data(p, dz, w, none))},
                                                        {"dw", compare(dw, reference_backward_filter(p, x, dz, none))},
                                                        {"db", compare(db, reference_backward_bias(p, dz, none))}};
  for (const auto& [name, c] : results) {
    EXPECT_EQ(c.non_finite, 0) << name << ": elements not written (NaN), first at " << c.first_bad << "\n"
                               << plan.describe();
    EXPECT_LT(c.relative_error, tolerance) << name << "\n" << plan.describe();
  }
}

using FusedBackwardResult = RunResult;

// dy * f'(pre) in float64 for y = f(pre), as the host backend's reference loops define it.
inline double reference_activation_grad(const ooc::FusedActivation& a, double pre, double y, double dy) {
  const auto sigmoid = [](double t) { return 1.0 / (1.0 + std::exp(-t)); };
  switch (a.mode) {
    case ooc::ActivationMode::relu: return pre > 0 ? dy : 0.0;
    case ooc::ActivationMode::sigmoid: return dy * y * (1.0 - y);
    case ooc::ActivationMode::tanh: return dy * (1.0 - y * y);
    case ooc::ActivationMode::clipped_relu: return pre > 0 && pre < a.coef ? dy : 0.0;
    case ooc::ActivationMode::elu: return pre > 0 ? dy : dy * a.coef * std::exp(pre);
    case ooc::ActivationMode::swish: {
      const double s = sigmoid(a.coef * pre);
      return dy * (s + a.coef * pre * s * (1.0 - s));
    }
    case ooc::ActivationMode::gelu:
      return dy * (0.5 * std::erfc(-pre / std::sqrt(2.0)) + pre * std::exp(-0.5 * pre * pre) / std::sqrt(2.0 * M_PI));
    case ooc::ActivationMode::leaky_relu: return pre > 0 ? dy : a.coef * dy;
  }
  return dy;
}

// (dx, dw, db) for spec's geometry (spec.op must be backward_data, beta 0) under memory_limit,
// checked against the three float64 references. With `activation`: the activation's backward
// folded in (y = act(pre) for a random pre; pre passed only when with_pre), the references taken
// of dz = dy * act'(pre).
inline FusedBackwardResult run_fused_backward_and_check(const BackwardSpec& spec, size_t memory_limit,
                                                        ooc::BackendKind backend, unsigned seed,
                                                        CallerMemory memory = CallerMemory::pageable,
                                                        double tolerance = 1e-5,
                                                        const ooc::FusedActivation* activation = nullptr,
                                                        bool with_pre = true) {
  const ooc::ConvProblem p = spec.problem();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (OOC_TEST_SEED to replay), " + p.describe() + ", memory_limit " +
               std::to_string(memory_limit));
  std::mt19937 rng(seed);
  // Positive means: a dw or db element is one long sum, which zero-mean inputs may cancel.
  const auto x = random_vector(static_cast<size_t>(p.x_elements()), rng, 0.25);
  const auto w = random_vector(static_cast<size_t>(p.w_elements()), rng, 0.25);
  const auto dy = random_vector(static_cast<size_t>(p.y_elements()), rng, 0.25);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> dx0(static_cast<size_t>(p.x_elements()), nan), dw0(static_cast<size_t>(p.w_elements()), nan),
      db0(static_cast<size_t>(p.k), nan);
  // The activation's input and output, and the gradient dz the three references see.
  const auto pre = random_vector(static_cast<size_t>(p.y_elements()), rng);
  std::vector<float> y(pre.size()), dz = dy;
  if (activation) {
    for (size_t i = 0; i < pre.size(); ++i) {
      y[i] = static_cast<float>(reference_activation(*activation, pre[i]));
      dz[i] = static_cast<float>(activation->identity ? dy[i] : reference_activation_grad(*activation, pre[i], y[i],
                                                                                            dy[i]));
    }
  }
  CallerCopy xc(x, memory), wc(w, memory), dyc(dy, memory), dxc(dx0, memory), dwc(dw0, memory), dbc(db0, memory),
      yc(y, memory), prec(pre, memory);
  const ooc::Options options = options_for(backend, memory_limit);
  FusedBackwardResult r;
  const bool ran = completes("conv_backward_data_filter_bias", [&] {
    if (activation)
      ooc::activation_conv_backward_data_filter_bias(p, *activation, xc.data(), dyc.data(), wc.data(), yc.data(),
                                                     with_pre ? prec.data() : nullptr, dxc.data(), dwc.data(),
                                                     dbc.data(), options, &r.plan, &r.stats);
    else
      ooc::conv_backward_data_filter_bias(p, xc.data(), dyc.data(), wc.data(), dxc.data(), dwc.data(), dbc.data(),
                                          options, &r.plan, &r.stats);
  });
  if (!ran) return r;
  expect_three_gradients(p, x, w, dz, dxc.contents(), dwc.contents(), dbc.contents(), tolerance, r.plan);
  EXPECT_EQ(xc.contents(), x) << "x was modified";
  EXPECT_EQ(wc.contents(), w) << "w was modified";
  EXPECT_EQ(dyc.contents(), dy) << "dy was modified";
  EXPECT_EQ(yc.contents(), y) << "y was modified";
  EXPECT_EQ(prec.contents(), pre) << "pre was modified";
  expect_run_as_planned(r.plan, r.stats, memory_limit, memory, fused_backward_direct_h2d_bytes);
  const int y_inputs = !activation || activation->identity ? 1 : with_pre ? 3 : 2;
  EXPECT_EQ(r.plan.y_inputs, y_inputs) << "dy, y and pre each cross the link once";
  check_fused_backward_plan(r.plan);
  return r;
}

struct FusedBackwardCase {
  const char* name;
  BackwardSpec spec;
  std::function<bool(const ooc::Plan&)> expect;  // the split the budget must cause (nullptr: the default budget)
};
inline void PrintTo(const FusedBackwardCase& c, std::ostream* os) { *os << c.name; }

// The tests of one fused-backward case: fc, the case, and p, its problem.
class FusedBackwardCaseTest : public ::testing::TestWithParam<FusedBackwardCase> {
 protected:
  const FusedBackwardCase& fc = GetParam();
  const ooc::ConvProblem p = fc.spec.problem();
};

// Each split kind of the fused backward, alone and combined, with uneven edges and the geometries
// whose dx rows are hard to carry: strides beyond the kernel span, padding wider than the kernel,
// dilation, tiles smaller than the halo.
inline std::vector<FusedBackwardCase> fused_backward_cases() {
  using P = const ooc::Plan&;
  const auto D = ooc::Operation::backward_data;
  auto splits = [](int64_t n, int64_t c, int spatial) {
    return [n, c, spatial](P p) {
      for (int d = 0; d < ooc::kMaxSpatial; ++d)
        if ((p.splits_out[d] > 1) != (d == spatial)) return false;
      return (p.splits_n > 1) == (n > 0) && (p.splits_c > 1) == (c > 0);
    };
  };
  return {
      {"whole_default_budget", backward_spec(D, {2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}), nullptr},
      {"n", backward_spec(D, {7, 2, 40}, {3, 2, 3}, {1}, {1}), splits(1, 0, -1)},
      {"c", backward_spec(D, {1, 9, 40}, {3, 9, 3}, {1}, {1}), splits(0, 1, -1)},
      {"n_c", backward_spec(D, {5, 7, 8}, {3, 7, 8}), splits(1, 1, -1)},
      {"d0_padding", backward_spec(D, {1, 2, 101}, {2, 2, 3}, {1}, {1}), splits(0, 0, 0)},
      {"d0_stride_dilation", backward_spec(D, {1, 1, 211}, {2, 1, 5}, {2}, {3}, {3}), splits(0, 0, 0)},
      {"d0_stride_beyond_kernel", backward_spec(D, {1, 2, 203}, {2, 2, 1}, {3}), splits(0, 0, 0)},
      {"d0_stride5_dilated_span3", backward_spec(D, {1, 1, 203}, {2, 1, 2}, {5}, {1}, {2}), splits(0, 0, 0)},
      {"d0_padding_wider_than_kernel", backward_spec(D, {1, 2, 60}, {3, 2, 1}, {1}, {3}), splits(0, 0, 0)},
      {"d1_2d", backward_spec(D, {1, 2, 5, 151}, {3, 2, 3, 3}, {1, 2}, {1, 1}), splits(0, 0, 1)},
      {"d2_3d", backward_spec(D, {1, 1, 3, 4, 150}, {2, 1, 3, 3, 3}, {1}, {0, 1, 2}, {1, 1, 2}), splits(0, 0, 2)},
      {"d0_3d_with_n_c", backward_spec(D, {3, 5, 40, 6, 5}, {4, 5, 3, 3, 3}, {1}, {1}), splits(1, 1, 0)},
      {"h_with_c_2d", backward_spec(D, {1, 8, 60, 9}, {3, 8, 5, 3}, {1}, {2, 1}, {1}), splits(0, 1, 0)},
      {"tightest_2d", backward_spec(D, {3, 6, 20, 17}, {5, 6, 3, 3}, {2, 1}, {1}, {1, 2}),
       [](P p) { return p.peak_device_bytes * 100 < p.memory_limit * 101; }},
      {"tightest_3d", backward_spec(D, {2, 3, 9, 8, 7}, {4, 3, 3, 2, 3}, {1}, {1, 0, 2}, {2, 1, 1}),
       [](P p) { return p.peak_device_bytes * 100 < p.memory_limit * 101; }},
  };
}

// --------------------------------------------------------------------------------------------
// conv_bias_activation_pooling_forward

// The pooling (kernel, stride, padding) of conv's output, or nothing when that output is too small
// for the window.
inline std::optional<ooc::ConvProblem> pooling_of(const ooc::ConvProblem& conv, const Shape& kernel,
                                                  const Shape& stride, const Shape& padding) {
  try {
    return ooc::pool_problem(conv.y_shape(), kernel, stride, padding);
  } catch (const ooc::invalid_argument&) {
    return std::nullopt;
  }
}

// Calls f(i, plane, lo, hi) for the i-th pooled element (of plane = n * c + channel): its window's
// part inside the pooled tensor, [lo, hi) per spatial dim.
template <typename F>
void for_each_window(const ooc::ConvProblem& pool, F f) {
  size_t i = 0;
  for (int64_t plane = 0; plane < pool.n * pool.c; ++plane)
    for (int64_t q0 = 0; q0 < pool.out[0]; ++q0)
      for (int64_t q1 = 0; q1 < pool.out[1]; ++q1)
        for (int64_t q2 = 0; q2 < pool.out[2]; ++q2) {
          const int64_t q[3] = {q0, q1, q2};
          std::array<int64_t, 3> lo{}, hi{};
          for (int d = 0; d < 3; ++d) {
            lo[d] = std::max<int64_t>(0, q[d] * pool.stride[d] - pool.padding[d]);
            hi[d] = std::min(pool.in[d], q[d] * pool.stride[d] - pool.padding[d] + pool.kernel[d]);
          }
          f(i++, plane, lo, hi);
        }
}

// The index of element (a, b, e) of a plane of the pooling's input.
inline size_t pooled_input_at(const ooc::ConvProblem& pool, int64_t plane, int64_t a, int64_t b, int64_t e) {
  return static_cast<size_t>(((plane * pool.in[0] + a) * pool.in[1] + b) * pool.in[2] + e);
}

// Pooling of a [n, c, spatial...] tensor in float64 (cuDNN's semantics: max over the window's part
// inside the tensor, avg dividing by the whole window or, excluding padding, by that part).
inline std::vector<double> reference_pool(const ooc::ConvProblem& pool, ooc::PoolMode mode, const std::vector<double>& y) {
  std::vector<double> out(static_cast<size_t>(pool.y_elements()));
  const double window = static_cast<double>(pool.kernel[0] * pool.kernel[1] * pool.kernel[2]);
  for_each_window(pool, [&](size_t i, int64_t plane, const auto& lo, const auto& hi) {
    double acc = mode == ooc::PoolMode::max ? -INFINITY : 0.0;
    int64_t count = 0;
    for (int64_t a = lo[0]; a < hi[0]; ++a)
      for (int64_t b = lo[1]; b < hi[1]; ++b)
        for (int64_t e = lo[2]; e < hi[2]; ++e) {
          const double v = y[pooled_input_at(pool, plane, a, b, e)];
          acc = mode == ooc::PoolMode::max ? std::max(acc, v) : acc + v;
          ++count;
        }
    out[i] = mode == ooc::PoolMode::max ? acc : acc / (mode == ooc::PoolMode::avg ? window : double(count));
  });
  return out;
}

// Every pooled element is written back once, by a reduction's last chunk, each from y rows that
// hold all of its window (no window straddles two chunks); the budget held.
inline void check_pooling_plan(const ooc::Plan& plan, const ooc::ConvProblem& pool) {
  ASSERT_EQ(plan.fused, "conv_bias_activation_pooling_forward");
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  std::vector<int> written(static_cast<size_t>(pool.y_elements()), 0);
  for (const ooc::Chunk& ch : plan.chunks) {
    for (int d = 0; d < ooc::kMaxSpatial; ++d) {
      EXPECT_LE(ch.out_read[d].begin, ch.target[d].begin);
      EXPECT_GE(ch.out_read[d].end, ch.target[d].end);
      for (int64_t q = ch.target[d].begin; q < ch.target[d].end; ++q) {
        const int64_t lo = std::max<int64_t>(0, q * pool.stride[d] - pool.padding[d]);
        const int64_t hi = std::min(pool.in[d], q * pool.stride[d] - pool.padding[d] + pool.kernel[d]);
        EXPECT_TRUE(ch.out[d].begin <= lo && hi <= ch.out[d].end) << "pooled row " << q << " straddles chunks";
      }
    }
    if (ch.last_c) for_each_box_index(ch.n, ch.k, ch.target, pool.c, pool.out, [&](size_t i) { ++written[i]; });
  }
  EXPECT_EQ(std::count(written.begin(), written.end(), 1), static_cast<int64_t>(written.size()));
  EXPECT_EQ(plan.bytes_d2h, static_cast<size_t>(pool.y_elements()) * 4);
}

// pool(act(alpha * conv + beta * z + bias)) for spec, checked; returns what ran.
inline RunResult run_fused_pooling_and_check(const ConvSpec& spec, const ooc::FusedActivation& activation,
                                             const ooc::ConvProblem& pool, ooc::PoolMode mode, size_t memory_limit,
                                             ooc::BackendKind backend, unsigned seed,
                                             CallerMemory memory = CallerMemory::pageable, double tolerance = 1e-5) {
  const ooc::ConvProblem p = spec.problem();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + p.describe() + ", memory_limit " + std::to_string(memory_limit));
  std::mt19937 rng(seed);
  const auto [x, w, bias] = random_conv_inputs(p, rng, spec.input_mean);
  const auto z = random_vector(static_cast<size_t>(p.y_elements()), rng);
  CallerCopy xc(x, memory), wc(w, memory), bc(bias, memory), zc(z, memory),
      outc(std::vector<float>(static_cast<size_t>(pool.y_elements()), std::nanf("")), memory);
  RunResult r;
  const bool ran = completes("conv_bias_activation_pooling_forward", [&] {
    ooc::conv_bias_activation_pooling_forward(p, activation, pool, mode, xc.data(), wc.data(), zc.data(),
                                              spec.bias ? bc.data() : nullptr, outc.data(),
                                              options_for(backend, memory_limit), &r.plan, &r.stats);
  });
  if (!ran) return r;
  std::vector<double> y = reference_conv(p, x, w, spec.bias ? &bias : nullptr, &z);
  const std::vector<double> pre = reference_pool(pool, mode, y);
  for (double& v : y) v = reference_activation(activation, v);
  const std::vector<double> ref = reference_pool(pool, mode, y);
  const Comparison c = compare(outc.contents(), ref);
  EXPECT_EQ(c.non_finite, 0) << r.plan.describe();
  EXPECT_LT(activation_error(c, ref, pre), tolerance) << r.plan.describe();
  EXPECT_EQ(xc.contents(), x);
  EXPECT_EQ(zc.contents(), z);
  expect_run_within_plan(r.plan, r.stats, memory);
  check_pooling_plan(r.plan, pool);
  return r;
}

// --------------------------------------------------------------------------------------------
// deconv_bias_activation_forward

struct DeconvCase {
  const char* name;
  Shape x, w, stride, padding, output_padding, dilation;

  // With bias, alpha1 scaling the transposed convolution and alpha2 z.
  ooc::ConvProblem problem(double alpha1, double alpha2) const {
    return ooc::deconv_problem(x, w, stride, padding, output_padding, dilation, 1, alpha1, alpha2, true);
  }
};
inline void PrintTo(const DeconvCase& c, std::ostream* os) { *os << c.name; }

// The tests of one transposed-convolution case: dc, the case, and p, its problem at alpha1 and
// alpha2 below.
class DeconvCaseTest : public ::testing::TestWithParam<DeconvCase> {
 protected:
  static constexpr double alpha1 = 0.75, alpha2 = -0.5;
  const DeconvCase& dc = GetParam();
  const ooc::ConvProblem p = dc.problem(alpha1, alpha2);

  size_t needed_bytes(ooc::BackendKind backend) const {
    return needed_bytes_of(ooc::plan_deconv_bias_activation_forward, p, backend);
  }
};

inline std::vector<DeconvCase> deconv_cases() {
  return {
      {"1d_output_padding", {2, 4, 11}, {4, 3, 3}, {2}, {1}, {1}, {1}},
      {"2d", {2, 4, 9, 7}, {4, 3, 3, 3}, {1}, {1}, {0}, {1}},
      {"2d_stride_beyond_kernel", {2, 3, 6, 5}, {3, 5, 1, 2}, {3, 2}, {0, 1}, {2, 1}, {1}},
      {"3d_dilated", {1, 2, 4, 5, 3}, {2, 3, 3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 0, 0}, {1, 2, 1}},
      {"many_in_channels", {1, 29, 8}, {29, 2, 3}, {1}, {1}, {0}, {1}},
  };
}

// y = act(alpha1 * conv_transpose(x, w) + alpha2 * z + bias) under memory_limit, checked against
// conv_transpose's float64 reference (backward data's) plus z, bias and the activation.
inline RunResult run_deconv_and_check(const DeconvCase& dc, const ooc::FusedActivation& activation, double alpha1,
                                      double alpha2, size_t memory_limit, ooc::BackendKind backend, unsigned seed,
                                      CallerMemory memory = CallerMemory::pageable, double tolerance = 1e-5) {
  const ooc::ConvProblem p = dc.problem(alpha1, alpha2);
  SCOPED_TRACE(std::string(dc.name) + ", seed " + std::to_string(seed) + ", memory_limit " +
               std::to_string(memory_limit));
  std::mt19937 rng(seed);
  const auto x = random_vector(static_cast<size_t>(p.y_elements()), rng);  // x plays backward data's dy
  const auto w = random_vector(static_cast<size_t>(p.w_elements()), rng);
  const auto bias = random_vector(static_cast<size_t>(p.c), rng);
  const auto z = random_vector(static_cast<size_t>(p.x_elements()), rng);
  CallerCopy xc(x, memory), wc(w, memory), bc(bias, memory), zc(z, memory),
      yc(std::vector<float>(static_cast<size_t>(p.x_elements()), std::nanf("")), memory);
  RunResult r;
  const bool ran = completes("deconv_bias_activation_forward", [&] {
    ooc::deconv_bias_activation_forward(p, activation, xc.data(), wc.data(), zc.data(), bc.data(), yc.data(),
                                        options_for(backend, memory_limit), &r.plan, &r.stats);
  });
  if (!ran) return r;
  const std::vector<double> pre = [&] {
    std::vector<double> v = reference_backward_data(p, x, w, z);  // alpha1 * conv_transpose + alpha2 * z
    const int64_t plane = p.in[0] * p.in[1] * p.in[2];
    for (size_t i = 0; i < v.size(); ++i) v[i] += bias[static_cast<size_t>((static_cast<int64_t>(i) / plane) % p.c)];
    return v;
  }();
  std::vector<double> ref = pre;
  for (double& v : ref) v = reference_activation(activation, v);
  const Comparison c = compare(yc.contents(), ref);
  EXPECT_EQ(c.non_finite, 0) << r.plan.describe();
  EXPECT_LT(activation_error(c, ref, pre), tolerance) << r.plan.describe();
  EXPECT_EQ(xc.contents(), x);
  EXPECT_EQ(zc.contents(), z);
  EXPECT_EQ(r.plan.fused, "deconv_bias_activation_forward");
  expect_run_within_plan(r.plan, r.stats, memory);
  EXPECT_EQ(r.stats.bytes_d2h, static_cast<size_t>(p.x_elements()) * 4);
  return r;
}

// --------------------------------------------------------------------------------------------
// pooling_activation_conv_backward_data_filter_bias

// dy of pooling y for dq in float64: max routes each window's gradient to its first largest
// element; avg spreads it over the window (by its whole size, or excluding padding, its part in y).
inline std::vector<double> reference_pool_backward(const ooc::ConvProblem& pool, ooc::PoolMode mode,
                                                   const std::vector<float>& y, const std::vector<float>& dq) {
  std::vector<double> dy(y.size(), 0.0);
  const double window = static_cast<double>(pool.kernel[0] * pool.kernel[1] * pool.kernel[2]);
  for_each_window(pool, [&](size_t i, int64_t plane, const auto& lo, const auto& hi) {
    const double count = static_cast<double>((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
    size_t best = pooled_input_at(pool, plane, lo[0], lo[1], lo[2]);
    for (int64_t a = lo[0]; a < hi[0]; ++a)
      for (int64_t b = lo[1]; b < hi[1]; ++b)
        for (int64_t e = lo[2]; e < hi[2]; ++e) {
          const size_t at = pooled_input_at(pool, plane, a, b, e);
          if (mode == ooc::PoolMode::max && y[at] > y[best]) best = at;
          if (mode != ooc::PoolMode::max) dy[at] += dq[i] / (mode == ooc::PoolMode::avg ? window : count);
        }
    if (mode == ooc::PoolMode::max) dy[best] += dq[i];
  });
  return dy;
}

// (dx, dw, db) through pool(act(pre)) for spec's geometry (tanh: no flat stretch, so max pooling
// has no ties), checked against the float64 references of dz = tanh'(pre) * pool_backward.
inline FusedBackwardResult run_pooled_backward_and_check(const BackwardSpec& spec, const ooc::ConvProblem& pool,
                                                         ooc::PoolMode mode, size_t memory_limit,
                                                         ooc::BackendKind backend, unsigned seed,
                                                         CallerMemory memory = CallerMemory::pageable,
                                                         double tolerance = 1e-5) {
  const ooc::ConvProblem p = spec.problem();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + p.describe() + ", memory_limit " + std::to_string(memory_limit));
  std::mt19937 rng(seed);
  const auto x = random_vector(static_cast<size_t>(p.x_elements()), rng, 0.25);
  const auto w = random_vector(static_cast<size_t>(p.w_elements()), rng, 0.25);
  const auto pre = random_vector(static_cast<size_t>(p.y_elements()), rng);
  const auto dq = random_vector(static_cast<size_t>(pool.y_elements()), rng, 0.25);
  const auto tanh_act = ooc::fused_activation_from_name("tanh", 0);
  std::vector<float> y(pre.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(std::tanh(static_cast<double>(pre[i])));
  std::vector<double> y64(y.begin(), y.end());
  const std::vector<double> q64 = reference_pool(pool, mode, y64);
  const std::vector<float> q(q64.begin(), q64.end());
  const std::vector<double> dy = reference_pool_backward(pool, mode, y, dq);
  std::vector<float> dz(dy.size());
  for (size_t i = 0; i < dz.size(); ++i) dz[i] = static_cast<float>(dy[i] * (1.0 - double(y[i]) * double(y[i])));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CallerCopy xc(x, memory), wc(w, memory), dqc(dq, memory), qc(q, memory), yc(y, memory),
      dxc(std::vector<float>(x.size(), nan), memory), dwc(std::vector<float>(w.size(), nan), memory),
      dbc(std::vector<float>(static_cast<size_t>(p.k), nan), memory);
  FusedBackwardResult r;
  const bool ran = completes("pooling_activation_conv_backward_data_filter_bias", [&] {
    ooc::pooling_activation_conv_backward_data_filter_bias(p, tanh_act, pool, mode, xc.data(), dqc.data(), wc.data(),
                                                           qc.data(), yc.data(), nullptr, dxc.data(), dwc.data(),
                                                           dbc.data(), options_for(backend, memory_limit), &r.plan,
                                                           &r.stats);
  });
  if (!ran) return r;
  expect_three_gradients(p, x, w, dz, dxc.contents(), dwc.contents(), dbc.contents(), tolerance, r.plan);
  EXPECT_EQ(dqc.contents(), dq) << "dq was modified";
  EXPECT_EQ(yc.contents(), y) << "y was modified";
  EXPECT_EQ(r.plan.fused, "pooling_activation_conv_backward_data_filter_bias");
  EXPECT_EQ(r.plan.pooled_inputs, 2);
  expect_run_within_plan(r.plan, r.stats, memory);
  return r;
}

// The smallest budget of the pooled fused backward (tanh, no pre) of `p` pooled by `pool`.
inline size_t pooled_backward_needed_bytes(const ooc::ConvProblem& p, const ooc::ConvProblem& pool,
                                           ooc::BackendKind backend) {
  const auto tanh_act = ooc::fused_activation_from_name("tanh", 0);
  return needed_bytes_of(
      [&](const ooc::ConvProblem& q, const ooc::Options& o) {
        return ooc::plan_pooling_activation_conv_backward_data_filter_bias(q, tanh_act, pool, false, o);
      },
      p, backend);
}

// The fused backward's split cases, pooled (overlapping, tiled and gapped windows; padded ones keep
// their dims whole).
inline std::vector<std::pair<const char*, ooc_test::Shape>> pooled_backward_windows() {
  return {{"overlap", {3, 1, 0}}, {"tiles", {2, 2, 0}}, {"gapped", {1, 3, 0}}, {"padded", {3, 2, 1}}};
}

}  // namespace ooc_test
