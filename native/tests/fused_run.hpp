// End-to-end runs of the fused functions (fused.hpp) through the public API, judged against float64
// references composed from the unfused ones: fresh random inputs, NaN-poisoned outputs, every element
// written, inputs untouched, measured traffic equal to the plan's, budget held. Shared by the host
// and cuda tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
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
  }
  return v;
}

// The activations a fused forward offers, with the coefficients the tests use.
inline std::vector<std::pair<std::string, ooc::FusedActivation>> fused_activations() {
  std::vector<std::pair<std::string, ooc::FusedActivation>> v;
  for (const auto& [name, coef] : std::vector<std::pair<std::string, double>>{
           {"identity", 0}, {"relu", 0}, {"sigmoid", 0}, {"tanh", 0}, {"clipped_relu", 0.6}, {"elu", 1.3},
           {"swish", 0.8}})
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
  const auto x = random_vector(static_cast<size_t>(p.x_elements()), rng, spec.input_mean);
  const auto w = random_vector(static_cast<size_t>(p.w_elements()), rng, spec.input_mean);
  const auto bias = random_vector(static_cast<size_t>(p.k), rng);
  const auto z = random_vector(static_cast<size_t>(p.y_elements()), rng);
  const std::vector<float> poison(static_cast<size_t>(p.y_elements()), std::nanf(""));
  CallerCopy xc(x, memory), wc(w, memory), bc(bias, memory), zc(z, memory), yc(z_is_y ? z : poison, memory);

  ooc::Options options;
  options.memory_limit = memory_limit;
  options.backend = backend;
  RunResult r;
  try {
    ooc::conv_bias_activation_forward(p, activation, xc.data(), wc.data(), z_is_y ? yc.data() : zc.data(),
                                      spec.bias ? bc.data() : nullptr, yc.data(), options, &r.plan, &r.stats);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "conv_bias_activation_forward threw: " << e.what();
    return r;
  }
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
  if (memory_limit) {
    EXPECT_EQ(r.plan.memory_limit, memory_limit);
  }
  EXPECT_LE(r.plan.peak_device_bytes, r.plan.memory_limit);
  EXPECT_EQ(r.stats.device_bytes_reserved, r.plan.peak_device_bytes);
  // z crosses once (where alpha2 != 0), y once: exactly the plan's traffic.
  EXPECT_EQ(r.stats.bytes_h2d, memory == CallerMemory::pageable ? r.plan.bytes_h2d : direct_h2d_bytes(r.plan));
  EXPECT_EQ(r.stats.bytes_d2h, r.plan.bytes_d2h);
  EXPECT_EQ(r.stats.bytes_d2h, static_cast<size_t>(p.y_elements()) * 4);
  EXPECT_EQ(r.stats.chunks, static_cast<int64_t>(r.plan.num_chunks()));
  check_plan(r.plan, true);
  return r;
}

}  // namespace ooc_test
