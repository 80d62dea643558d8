// Helpers shared by the libooc tests: problems, random tensors, the float64 reference convolution
// the backends are judged against, and error comparison.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ooc/ooc.hpp"
#include "plan/planner.hpp"

namespace ooc_test {

inline ooc::PlannerConfig config(size_t memory_limit, size_t workspace = 0) {
  ooc::PlannerConfig c;
  c.memory_limit = memory_limit;
  c.workspace_bytes = workspace;
  return c;
}

// The smallest peak any plan of `plan_for` needs, as the planner reports it when nothing fits.
template <typename PlanFor>
size_t smallest_budget(PlanFor plan_for, const ooc::ConvProblem& p, size_t workspace = 0) {
  try {
    plan_for(p, config(1, workspace));
  } catch (const ooc::out_of_budget& e) {
    return e.needed_bytes();
  }
  ADD_FAILURE() << "a 1-byte budget did not throw out_of_budget for " << p.describe();
  return 1;
}

using Shape = std::vector<int64_t>;

struct ConvSpec {
  Shape x, w, stride{1}, padding{0}, dilation{1};
  double alpha = 1.0, beta = 0.0;
  bool bias = false;
  // x and w are drawn from [input_mean - 1, input_mean + 1). Zero-mean inputs make a y of very few
  // elements (one long sum) cancel to near zero now and then, and fp32 error relative to that norm
  // then exceeds the tolerance by chance; such cases use a positive mean.
  double input_mean = 0.0;

  ooc::ConvProblem problem() const {
    return ooc::ConvProblem::forward(x, w, stride, padding, dilation, 1, alpha, beta, bias);
  }
};

inline std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

inline int64_t product(const Shape& s) {
  int64_t p = 1;
  for (int64_t v : s) p *= v;
  return p;
}

// Uniform in [-1, 1); values with many mantissa bits so that a misplaced element shows.
inline std::vector<float> random_vector(size_t count, std::mt19937& rng, double mean = 0.0) {
  std::uniform_real_distribution<float> dist(static_cast<float>(mean - 1.0), static_cast<float>(mean + 1.0));
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

// y = alpha * conv(x, w) + beta * y_old + bias, cross-correlation, accumulated in double by direct
// loops written independently of the library (unpadded coordinates, bounds checked per tap).
inline std::vector<double> reference_conv(const ooc::ConvProblem& p, const std::vector<float>& x,
                                          const std::vector<float>& w, const std::vector<float>* bias,
                                          const std::vector<float>* y_old) {
  const int64_t I0 = p.in[0], I1 = p.in[1], I2 = p.in[2];
  const int64_t O0 = p.out[0], O1 = p.out[1], O2 = p.out[2];
  const int64_t K0 = p.kernel[0], K1 = p.kernel[1], K2 = p.kernel[2];
  std::vector<double> y(static_cast<size_t>(p.y_elements()));
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t o0 = 0; o0 < O0; ++o0)
        for (int64_t o1 = 0; o1 < O1; ++o1)
          for (int64_t o2 = 0; o2 < O2; ++o2) {
            double acc = 0;
            for (int64_t c = 0; c < p.c; ++c)
              for (int64_t a = 0; a < K0; ++a) {
                const int64_t i0 = o0 * p.stride[0] + a * p.dilation[0] - p.padding[0];
                if (i0 < 0 || i0 >= I0) continue;
                for (int64_t b = 0; b < K1; ++b) {
                  const int64_t i1 = o1 * p.stride[1] + b * p.dilation[1] - p.padding[1];
                  if (i1 < 0 || i1 >= I1) continue;
                  for (int64_t e = 0; e < K2; ++e) {
                    const int64_t i2 = o2 * p.stride[2] + e * p.dilation[2] - p.padding[2];
                    if (i2 < 0 || i2 >= I2) continue;
                    const double xv = x[static_cast<size_t>((((n * p.c + c) * I0 + i0) * I1 + i1) * I2 + i2)];
                    const double wv = w[static_cast<size_t>((((k * p.c + c) * K0 + a) * K1 + b) * K2 + e)];
                    acc += xv * wv;
                  }
                }
              }
            const size_t yi = static_cast<size_t>((((n * p.k + k) * O0 + o0) * O1 + o1) * O2 + o2);
            double v = p.alpha * acc;
            if (y_old && p.beta != 0.0) v += p.beta * static_cast<double>((*y_old)[yi]);
            if (bias) v += static_cast<double>((*bias)[static_cast<size_t>(k)]);
            y[yi] = v;
          }
  return y;
}

struct Comparison {
  double relative_error = 0;  // ||y - ref|| / ||ref||
  int64_t non_finite = 0;     // elements never written (NaN poison) or broken
  int64_t first_bad = -1;
};

inline Comparison compare(const std::vector<float>& y, const std::vector<double>& ref) {
  Comparison c;
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      if (c.first_bad < 0) c.first_bad = static_cast<int64_t>(i);
      ++c.non_finite;
      continue;
    }
    const double d = static_cast<double>(y[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  c.relative_error = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

// True when `message` contains `name` as a whole word (so "w" is not found inside "show").
inline bool names_argument(const std::string& message, const std::string& name) {
  return std::regex_search(message, std::regex("(^|[^A-Za-z0-9_])" + name + "([^A-Za-z0-9_]|$)"));
}

inline std::string describe_chunk(const ooc::Chunk& ch) {
  std::ostringstream o;
  o << "chunk n[" << ch.n.begin << "," << ch.n.end << ") k[" << ch.k.begin << "," << ch.k.end << ") c["
    << ch.c.begin << "," << ch.c.end << ")";
  for (int d = 0; d < ooc::kMaxSpatial; ++d)
    o << " out" << d << "[" << ch.out[d].begin << "," << ch.out[d].end << ") in" << d << "[" << ch.in[d].begin
      << "," << ch.in[d].end << ")";
  o << " load_x=" << ch.load_x << " load_w=" << ch.load_w << " first_c=" << ch.first_c << " last_c=" << ch.last_c;
  return o.str();
}

// Calls f(i) with the flat index i of every element of the box n x c x space[0] x space[1] x
// space[2] of a tensor [N, channels, extent...] (C-contiguous, unused spatial dims of extent 1, as
// ooc::ConvProblem keeps them): how the plan checks count what chunks cover, element by element.
template <typename F>
void for_each_box_index(ooc::Range n, ooc::Range c, const std::array<ooc::Range, ooc::kMaxSpatial>& space,
                        int64_t channels, const ooc::Dims3& extent, F f) {
  for (int64_t i = n.begin; i < n.end; ++i)
    for (int64_t j = c.begin; j < c.end; ++j)
      for (int64_t a = space[0].begin; a < space[0].end; ++a)
        for (int64_t b = space[1].begin; b < space[1].end; ++b)
          for (int64_t e = space[2].begin; e < space[2].end; ++e)
            f(static_cast<size_t>((((i * channels + j) * extent[0] + a) * extent[1] + b) * extent[2] + e));
}

// Bounds of a random convolution geometry (1D to 3D), for the randomized planner and pipeline tests.
struct GeometryLimits {
  int64_t n, c, k;
  std::array<int64_t, 3> in;  // largest spatial extent for 1D, 2D, 3D
  int64_t kernel, stride, dilation;
};

// Fills spec's x, w, stride, padding and dilation (padding 0 to 2) at random within `limits`.
template <typename Spec, typename Pick>
void pick_geometry(Spec& spec, Pick& pick, const GeometryLimits& limits) {
  const int sd = static_cast<int>(pick(1, 3));
  const int64_t max_in = limits.in[static_cast<size_t>(sd - 1)];
  const int64_t c = pick(1, limits.c);
  spec.x = {pick(1, limits.n), c};
  spec.w = {pick(1, limits.k), c};
  spec.stride.clear();
  spec.padding.clear();
  spec.dilation.clear();
  for (int d = 0; d < sd; ++d) {
    spec.x.push_back(pick(1, max_in));
    spec.w.push_back(pick(1, limits.kernel));
    spec.stride.push_back(pick(1, limits.stride));
    spec.padding.push_back(pick(0, 2));
    spec.dilation.push_back(pick(1, limits.dilation));
  }
}

}  // namespace ooc_test
