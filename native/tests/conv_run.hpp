// One end-to-end forward convolution through ooc::conv_forward, judged against the float64
// reference: fresh random inputs, y poisoned with NaN (or random y_old when beta != 0), every
// element written, inputs untouched, measured traffic equal to the plan's, budget held.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "backend_fixtures.hpp"
#include "ooc/ooc.hpp"
#include "plan_checks.hpp"
#include "test_util.hpp"

namespace ooc_test {

// Fresh inputs each run; OOC_TEST_SEED=<n> replays a failure (the seed is printed with it).
inline unsigned test_seed(unsigned salt) {
  static const unsigned base = [] {
    if (const char* s = std::getenv("OOC_TEST_SEED")) return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
    return static_cast<unsigned>(std::random_device{}());
  }();
  return base + salt * 7919u;
}

// A seed of the case `name`'s own (plus `salt` where a case draws more than one): test_seed's, so
// fresh each run and replayed by OOC_TEST_SEED.
inline unsigned case_seed(const char* name, unsigned salt = 0) {
  return test_seed(static_cast<unsigned>(std::hash<std::string>{}(name)) + salt);
}

// A convolution's random inputs, drawn from rng in this order: x and w around input_mean (see
// ConvSpec), the bias around 0.
struct ConvInputs {
  std::vector<float> x, w, bias;
};
inline ConvInputs random_conv_inputs(const ooc::ConvProblem& p, std::mt19937& rng, double input_mean = 0.0) {
  ConvInputs in;
  in.x = random_vector(static_cast<size_t>(p.x_elements()), rng, input_mean);
  in.w = random_vector(static_cast<size_t>(p.w_elements()), rng, input_mean);
  in.bias = random_vector(static_cast<size_t>(p.k), rng);
  return in;
}

// The smallest device budget any plan of plan_fn (plan_conv_forward, ...) for `p` needs on `backend`.
template <typename PlanFn>
size_t needed_bytes_of(PlanFn plan_fn, const ooc::ConvProblem& p, ooc::BackendKind backend) {
  try {
    plan_fn(p, options_for(backend, 1));
  } catch (const ooc::out_of_budget& e) {
    return e.needed_bytes();
  }
  ADD_FAILURE() << "a 1-byte budget did not throw out_of_budget";
  return 1;
}

inline size_t needed_bytes(const ooc::ConvProblem& p, ooc::BackendKind backend) {
  return needed_bytes_of(ooc::plan_conv_forward, p, backend);
}

struct RunResult {
  ooc::Plan plan;
  ooc::RunStats stats;
};

// Runs `call`, the library call under test (`name`): false, with the failure recorded, when it
// throws, so that the run's checks are skipped rather than made on outputs it never wrote.
template <typename Call>
bool completes(const char* name, Call call) {
  try {
    call();
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << " threw: " << e.what();
    return false;
  }
}

// Bytes that cross the link when caller memory is DMA'd directly: only the part of each region
// inside its tensor (the halo outside is zeroed on the device, not copied).
inline size_t direct_h2d_bytes(const ooc::Plan& plan) {
  const ooc::ConvProblem& p = plan.problem;
  size_t bytes = (p.beta != 0.0 ? static_cast<size_t>(p.y_elements()) * 4 : 0) +
                 (p.has_bias ? static_cast<size_t>(p.k) * 4 : 0);
  for (const ooc::Chunk& ch : plan.chunks) {
    if (ch.load_x) {
      int64_t e = ch.n.size() * ch.c.size();
      for (int d = 0; d < ooc::kMaxSpatial; ++d)
        e *= std::max<int64_t>(0, std::min(ch.in[d].end, p.in[d]) - std::max<int64_t>(ch.in[d].begin, 0));
      bytes += static_cast<size_t>(e) * 4;
    }
    if (ch.load_w) bytes += w_tile_elements(ch, p) * 4;
  }
  return bytes;
}

// Page-locked copy of a vector, for CallerMemory::pinned.
class PinnedFloats {
 public:
  explicit PinnedFloats(const std::vector<float>& v)
      : n_(v.size()), p_(static_cast<float*>(ooc::alloc_pinned(std::max<size_t>(n_, 1) * sizeof(float)))) {
    std::copy(v.begin(), v.end(), p_);
  }
  ~PinnedFloats() { ooc::free_pinned(p_); }
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
  float* data() { return p_; }
  std::vector<float> vector() const { return std::vector<float>(p_, p_ + n_); }

 private:
  size_t n_;
  float* p_;
};

// What a run measured must be what its plan predicted: the budget asked for (0: the default) and
// held, an arena of the plan's peak, its D2H bytes and chunk count, and its H2D bytes, which for
// caller memory moved by direct DMA are direct_h2d(plan): only what lies inside the tensors (the
// plan counts halo zeros too, which the device zeroes instead).
inline void expect_run_as_planned(const ooc::Plan& plan, const ooc::RunStats& stats, size_t memory_limit,
                                  CallerMemory memory, size_t (*direct_h2d)(const ooc::Plan&)) {
  if (memory_limit) {
    EXPECT_EQ(plan.memory_limit, memory_limit);
  }
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  EXPECT_EQ(stats.device_bytes_reserved, plan.peak_device_bytes);
  EXPECT_EQ(stats.bytes_h2d, memory == CallerMemory::pageable ? plan.bytes_h2d : direct_h2d(plan));
  EXPECT_EQ(stats.bytes_d2h, plan.bytes_d2h);
  EXPECT_EQ(stats.chunks, static_cast<int64_t>(plan.num_chunks()));
}

// Runs `spec` under `memory_limit` (0: the default) and checks everything about the result.
inline RunResult run_and_check(const ConvSpec& spec, size_t memory_limit, ooc::BackendKind backend, unsigned seed,
                               double tolerance = 1e-5, CallerMemory memory = CallerMemory::pageable) {
  const ooc::ConvProblem p = spec.problem();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (OOC_TEST_SEED to replay), " + p.describe() + ", memory_limit " +
               std::to_string(memory_limit));
  std::mt19937 rng(seed);
  const auto [x, w, bias] = random_conv_inputs(p, rng, spec.input_mean);
  const std::vector<float> y_old = p.beta != 0.0 ? random_vector(static_cast<size_t>(p.y_elements()), rng)
                                                 : std::vector<float>(static_cast<size_t>(p.y_elements()),
                                                                      std::numeric_limits<float>::quiet_NaN());
  // The library gets copies; the originals prove the inputs were not written.
  std::vector<float> xc = x, wc = w, bc = bias, y = y_old;
  std::unique_ptr<PinnedFloats> px, pw, pb, py;
  float *xp = xc.data(), *wp = wc.data(), *bp = bc.data(), *yp = y.data();
  if (memory == CallerMemory::pinned) {
    px = std::make_unique<PinnedFloats>(x);
    pw = std::make_unique<PinnedFloats>(w);
    pb = std::make_unique<PinnedFloats>(bias);
    py = std::make_unique<PinnedFloats>(y_old);
    xp = px->data(), wp = pw->data(), bp = pb->data(), yp = py->data();
  }

  RunResult r;
  const bool ran = completes("conv_forward", [&] {
    ooc::conv_forward(p, xp, wp, spec.bias ? bp : nullptr, yp, options_for(backend, memory_limit), &r.plan,
                      &r.stats);
  });
  if (!ran) return r;
  if (memory == CallerMemory::pinned) {
    y = py->vector();
    xc = px->vector(), wc = pw->vector(), bc = pb->vector();
  }
  const std::vector<double> ref = reference_conv(p, x, w, spec.bias ? &bias : nullptr, &y_old);
  const Comparison c = compare(y, ref);
  EXPECT_EQ(c.non_finite, 0) << "elements not written (NaN), first at " << c.first_bad << "\n" << r.plan.describe();
  EXPECT_LT(c.relative_error, tolerance) << r.plan.describe();

  EXPECT_EQ(xc, x) << "x was modified";
  EXPECT_EQ(wc, w) << "w was modified";
  EXPECT_EQ(bc, bias) << "bias was modified";

  expect_run_as_planned(r.plan, r.stats, memory_limit, memory, direct_h2d_bytes);
  check_plan(r.plan, true);
  return r;
}

// Split predicates for the cases below.
using SplitCheck = std::function<bool(const ooc::Plan&)>;

// A problem, a budget (a multiple of the smallest peak; 0: the default limit), the split it must
// cause and whether that split must leave a smaller edge tile (checked on the host backend, whose
// cost model the budgets were chosen for; the cuda backend's model may pick other tile sizes).
struct PipelineCase {
  const char* name;
  ConvSpec spec;
  double budget_factor;
  SplitCheck expect;
  bool uneven = false;
};
inline void PrintTo(const PipelineCase& c, std::ostream* os) { *os << c.name; }

// A budget under which `backend` plans `p` the way `want` asks: the case's own multiple of the
// smallest peak first, then multiples from 1 to ~10 (so that cost-model changes move the budget,
// not the coverage). 0 when no budget does; `factor` 0 means the default limit, used as is.
inline size_t budget_for(const ooc::ConvProblem& p, ooc::BackendKind backend, double factor, const SplitCheck& want) {
  if (factor == 0) return 0;
  const size_t needed = needed_bytes(p, backend);
  std::vector<double> factors{factor};
  for (double f = 1.0; f < 10.0; f *= 1.08) factors.push_back(f);
  for (double f : factors) {
    const size_t budget = static_cast<size_t>(static_cast<double>(needed) * f);
    if (want(ooc::plan_conv_forward(p, options_for(backend, budget)))) return budget;
  }
  return 0;
}

inline std::vector<PipelineCase> pipeline_cases() {
  using P = const ooc::Plan&;
  return {
      {"whole_default_budget", {{2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}, {1}, 1.0, 0.0, true}, 0,
       [](P p) { return p.num_chunks() == 1; }},
      {"n_alone", {{7, 1, 300}, {1, 1, 300}, {1}, {0}, {1}, 0.5, 0.0, true}, 1.0,
       [](P p) { return p.splits_n > 1 && split_dims(p) == 1; }},
      {"n_alone_uneven", {{7, 1, 300}, {1, 1, 300}}, 1.5,
       [](P p) { return p.splits_n > 1 && split_dims(p) == 1; }, true},
      {"k_alone_bias", {{1, 1, 300}, {9, 1, 300}, {1}, {0}, {1}, 1.0, 0.0, true}, 1.0,
       [](P p) { return p.splits_k > 1 && split_dims(p) == 1; }},
      {"k_alone_uneven_bias", {{1, 1, 300}, {7, 1, 300}, {1}, {0}, {1}, 1.0, 0.0, true}, 1.5,
       [](P p) { return p.splits_k > 1 && split_dims(p) == 1; }, true},
      // y is a single element here (one sum of C x 300 products): positive-mean inputs, see ConvSpec.
      {"c_alone_beta", {{1, 9, 300}, {1, 9, 300}, {1}, {0}, {1}, 1.0, 0.5, false, 0.5}, 1.0,
       [](P p) { return p.splits_c > 1 && split_dims(p) == 1; }},
      {"c_alone_uneven_alpha_beta_bias", {{1, 7, 300}, {1, 7, 300}, {1}, {0}, {1}, -0.75, 1.25, true, 0.5}, 2.0,
       [](P p) { return p.splits_c > 1 && split_dims(p) == 1; }, true},
      {"d0_alone_stride_dilation_padding", {{1, 1, 301}, {1, 1, 5}, {2}, {3}, {2}, 1.0, 0.0, true}, 1.0,
       [](P p) { return p.splits_out[0] > 1 && split_dims(p) == 1; }},
      {"d0_alone_uneven", {{1, 1, 301}, {1, 1, 5}, {2}, {3}, {2}}, 1.5,
       [](P p) { return p.splits_out[0] > 1 && split_dims(p) == 1; }, true},
      {"d1_alone", {{1, 1, 3, 301}, {1, 1, 3, 3}, {1, 2}, {0, 1}, {1}, 1.0, 0.5, false}, 1.0,
       [](P p) { return p.splits_out[1] > 1 && split_dims(p) == 1; }},
      {"d2_alone", {{1, 1, 3, 3, 300}, {1, 1, 3, 3, 3}, {1}, {0, 0, 2}, {1, 1, 2}}, 1.0,
       [](P p) { return p.splits_out[2] > 1 && split_dims(p) == 1; }},
      {"2d_tightest", {{3, 6, 20, 17}, {5, 6, 3, 3}, {2, 1}, {1}, {1, 2}, 1.5, 0.5, true}, 1.0,
       [](P p) { return split_dims(p) >= 2; }},
      {"2d_mixed_budget", {{3, 6, 20, 17}, {5, 6, 3, 3}, {2, 1}, {1}, {1, 2}, 1.0, 0.0, true}, 6.0,
       [](P p) { return p.num_chunks() > 1; }},
      {"3d_tightest", {{2, 3, 9, 8, 7}, {4, 3, 3, 2, 3}, {1}, {1, 0, 2}, {2, 1, 1}, 1.0, -0.5, true}, 1.0,
       [](P p) { return split_dims(p) >= 2; }},
      {"3d_strided", {{2, 2, 11, 10, 9}, {3, 2, 3, 3, 3}, {2, 3, 1}, {1, 2, 0}, {1, 1, 2}}, 3.0,
       [](P p) { return p.num_chunks() > 1; }},
      {"spatial_and_c", {{1, 16, 40, 40}, {2, 16, 3, 3}, {1}, {1}, {1}, 1.0, 0.25, true}, 1.0,
       [](P p) { return p.splits_c > 1 && (p.splits_out[0] > 1 || p.splits_out[1] > 1); }},
      {"1d_wide_kernel_tightest", {{2, 3, 100}, {4, 3, 7}, {3}, {4}, {2}, 1.0, 0.0, true}, 1.0,
       [](P p) { return p.splits_out[0] > 1; }},
      // Padding wider than the kernel: edge tiles read nothing but zeros outside the tensor.
      {"tiles_entirely_in_padding", {{1, 2, 4, 4}, {3, 2, 1, 1}, {1}, {3}, {1}, 1.0, 0.0, true}, 1.0,
       [](P p) { return p.splits_out[0] > 1 || p.splits_out[1] > 1; }},
      {"alpha_zero", {{2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}, {1}, 0.0, 1.0, true}, 1.0,
       [](P p) { return p.num_chunks() > 1; }},
  };
}

}  // namespace ooc_test
