// One end-to-end run of a gradient through the public API, checked against the float64 reference:
// fresh random inputs, the output NaN-poisoned (beta == 0) or random (beta != 0), every element
// written, inputs untouched, measured traffic equal to the plan's, budget held, plan properties.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backward_plan_checks.hpp"
#include "conv_run.hpp"
#include "ooc/ooc.hpp"

namespace ooc_test {

inline ooc::Plan plan_backward(const ooc::ConvProblem& p, const ooc::Options& o) {
  switch (p.op) {
    case Operation::backward_data: return ooc::plan_conv_backward_data(p, o);
    case Operation::backward_filter: return ooc::plan_conv_backward_filter(p, o);
    default: return ooc::plan_conv_backward_bias(p, o);
  }
}

// The smallest device budget any plan for `p` needs on `backend`.
inline size_t backward_needed_bytes(const ooc::ConvProblem& p, ooc::BackendKind backend) {
  return needed_bytes_of(plan_backward, p, backend);
}

// Bytes a run moves H2D when caller memory is DMA'd directly: only what lies inside each tensor
// (or window): x slabs clipped to x, dy rows read, dx targets.
inline size_t backward_direct_h2d_bytes(const ooc::Plan& plan) {
  const ooc::ConvProblem& p = plan.problem;
  auto inside = [](ooc::Range r, int64_t extent) {
    return std::max<int64_t>(0, std::min(r.end, extent) - std::max<int64_t>(r.begin, 0));
  };
  size_t bytes = 0;
  for (const ooc::Chunk& ch : plan.chunks) {
    int64_t xe = ch.n.size() * ch.c.size(), ye = ch.n.size() * ch.k.size();
    for (int d = 0; d < ooc::kMaxSpatial; ++d) {
      xe *= p.op == Operation::backward_data ? ch.target[d].size() : inside(ch.in[d], p.in[d]);
      ye *= p.op == Operation::backward_data ? ch.out_read[d].size() : ch.out[d].size();
    }
    const int64_t we = ch.k.size() * ch.c.size() * p.kernel[0] * p.kernel[1] * p.kernel[2];
    if (ch.load_x) bytes += static_cast<size_t>(xe) * 4;
    if (ch.load_y) bytes += static_cast<size_t>(ye) * 4;
    if (ch.load_w) bytes += static_cast<size_t>(we) * 4;
    if (ch.first_c && p.beta != 0.0)
      bytes += 4 * static_cast<size_t>(p.op == Operation::backward_data     ? xe
                                       : p.op == Operation::backward_filter ? we
                                                                            : ch.k.size());
  }
  return bytes;
}

// One tensor as the library is given it: a copy of the original, in pageable or pinned memory.
class CallerCopy {
 public:
  CallerCopy(const std::vector<float>& original, CallerMemory memory) : copy_(original) {
    if (memory == CallerMemory::pinned) pinned_ = std::make_unique<PinnedFloats>(original);
  }
  float* data() { return pinned_ ? pinned_->data() : copy_.data(); }
  std::vector<float> contents() const { return pinned_ ? pinned_->vector() : copy_; }

 private:
  std::vector<float> copy_;
  std::unique_ptr<PinnedFloats> pinned_;
};

struct BackwardResult {
  ooc::Plan plan;
  ooc::RunStats stats;
  std::vector<float> output;
};

// Runs `spec` under `memory_limit` (0: the default) and checks everything about the result.
inline BackwardResult run_backward_and_check(const BackwardSpec& spec, size_t memory_limit, ooc::BackendKind backend,
                                             unsigned seed, double tolerance = 1e-5,
                                             CallerMemory memory = CallerMemory::pageable) {
  const ooc::ConvProblem p = spec.problem();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (OOC_TEST_SEED to replay), " + p.describe() + ", memory_limit " +
               std::to_string(memory_limit));
  std::mt19937 rng(seed);
  const ooc::ConvProblem fwd = spec.forward();
  const std::vector<float> x = random_vector(static_cast<size_t>(fwd.x_elements()), rng, 0.25);
  const std::vector<float> w = random_vector(static_cast<size_t>(fwd.w_elements()), rng, 0.25);
  const std::vector<float> dy = random_vector(static_cast<size_t>(fwd.y_elements()), rng, 0.25);
  const size_t out_elements = static_cast<size_t>(gradient_elements(p));
  const std::vector<float> old = p.beta != 0.0 ? random_vector(out_elements, rng)
                                               : std::vector<float>(out_elements, std::numeric_limits<float>::quiet_NaN());
  // The library gets copies; the originals prove the inputs were not written.
  CallerCopy xc(x, memory), wc(w, memory), dyc(dy, memory), outc(old, memory);
  const ooc::Options options = options_for(backend, memory_limit);
  BackwardResult r;
  const bool ran = completes("the backward call", [&] {
    switch (p.op) {
      case Operation::backward_data:
        ooc::conv_backward_data(p, dyc.data(), wc.data(), outc.data(), options, &r.plan, &r.stats);
        break;
      case Operation::backward_filter:
        ooc::conv_backward_filter(p, xc.data(), dyc.data(), outc.data(), options, &r.plan, &r.stats);
        break;
      default:
        ooc::conv_backward_bias(p, dyc.data(), outc.data(), options, &r.plan, &r.stats);
        break;
    }
  });
  if (!ran) return r;
  const std::vector<float> out = outc.contents();
  r.output = out;
  const std::vector<double> ref = reference_gradient(p, x, w, dy, old);
  const Comparison c = compare(out, ref);
  EXPECT_EQ(c.non_finite, 0) << "elements not written (NaN), first at " << c.first_bad << "\n" << r.plan.describe();
  EXPECT_LT(c.relative_error, tolerance) << r.plan.describe();
  EXPECT_EQ(xc.contents(), x) << "x was modified";
  EXPECT_EQ(wc.contents(), w) << "w was modified";
  EXPECT_EQ(dyc.contents(), dy) << "dy was modified";

  EXPECT_EQ(r.plan.problem.op, p.op);
  expect_run_as_planned(r.plan, r.stats, memory_limit, memory, backward_direct_h2d_bytes);
  check_backward_plan(r.plan, true);
  return r;
}

// A problem, a budget (a multiple of the smallest peak; 0: the default limit) and the split it
// must cause (host backend: the budgets were chosen for its cost model).
struct BackwardCase {
  const char* name;
  BackwardSpec spec;
  double budget_factor;
  std::function<bool(const ooc::Plan&)> expect;
  bool uneven = false;
};
inline void PrintTo(const BackwardCase& c, std::ostream* os) { *os << c.name; }

// The case's budget on `backend`: budget_factor times its smallest peak there (0, the default
// limit, for factor 0).
inline size_t case_budget(const BackwardCase& bc, ooc::BackendKind backend) {
  if (bc.budget_factor == 0) return 0;
  return static_cast<size_t>(static_cast<double>(backward_needed_bytes(bc.spec.problem(), backend)) * bc.budget_factor);
}

// The cases every backend runs: each split kind of each gradient, with the budget that forces it.
inline std::vector<BackwardCase> backward_cases() {
  using O = Operation;
  using P = const ooc::Plan&;
  const O D = O::backward_data, F = O::backward_filter, B = O::backward_bias;
  auto only = [](std::function<bool(P)> split, int dims) {
    return [split, dims](P p) { return split(p) && split_dims(p) == dims; };
  };
  auto many = [](P p) { return p.num_chunks() > 1; };
  return {
      // backward data: dx tiles along n, c and space; k accumulates.
      {"data_whole_default_budget", backward_spec(D, {2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}), 0, [](P p) { return p.num_chunks() == 1; }},
      {"data_n_alone", backward_spec(D, {8, 1, 256}, {1, 1, 256}), 1.0, only([](P p) { return p.splits_n > 1; }, 1)},
      {"data_n_alone_uneven", backward_spec(D, {7, 1, 256}, {1, 1, 256}), 1.5, only([](P p) { return p.splits_n > 1; }, 1), true},
      {"data_c_alone_beta", backward_spec(D, {1, 9, 256}, {1, 9, 256}, {1}, {0}, {1}, 1.0, 0.5), 1.0,
       only([](P p) { return p.splits_c > 1; }, 1)},
      {"data_k_accumulates_alpha_beta", backward_spec(D, {1, 1, 256}, {9, 1, 256}, {1}, {0}, {1}, -0.75, 1.25), 1.0,
       only([](P p) { return p.splits_k > 1; }, 1)},
      {"data_k_accumulates_uneven", backward_spec(D, {1, 1, 256}, {7, 1, 256}), 1.5, only([](P p) { return p.splits_k > 1; }, 1),
       true},
      {"data_d0_stride_dilation_padding", backward_spec(D, {1, 1, 301}, {1, 1, 5}, {2}, {3}, {2}), 1.0,
       only([](P p) { return p.splits_out[0] > 1; }, 1), true},
      // Stride beyond the kernel span: dx rows no dy row reaches, and tiles of only such rows.
      {"data_d0_stride3_kernel1", backward_spec(D, {1, 2, 301}, {2, 2, 1}, {3}), 1.0, only([](P p) { return p.splits_out[0] > 1; }, 1)},
      {"data_d0_stride3_kernel1_beta", backward_spec(D, {1, 2, 301}, {2, 2, 1}, {3}, {0}, {1}, 0.5, -1.5), 1.0,
       only([](P p) { return p.splits_out[0] > 1; }, 1)},
      {"data_d0_stride5_dilated_span3", backward_spec(D, {1, 1, 203}, {2, 1, 2}, {5}, {1}, {2}), 1.3, many},
      {"data_d1_alone", backward_spec(D, {1, 1, 3, 301}, {1, 1, 3, 3}, {1, 2}, {0, 1}, {1}, 1.0, 0.5), 1.0,
       only([](P p) { return p.splits_out[1] > 1; }, 1)},
      {"data_d2_alone", backward_spec(D, {1, 1, 3, 3, 300}, {1, 1, 3, 3, 3}, {1}, {0, 0, 2}, {1, 1, 2}), 1.0,
       only([](P p) { return p.splits_out[2] > 1; }, 1)},
      {"data_2d_tightest", backward_spec(D, {3, 6, 20, 17}, {5, 6, 3, 3}, {2, 1}, {1}, {1, 2}, 1.5, 0.5), 1.0,
       [](P p) { return p.num_chunks() > 4; }},
      {"data_2d_stride_gt_kernel", backward_spec(D, {2, 3, 23, 19}, {4, 3, 2, 1}, {3, 4}, {1, 0}), 1.0, many},
      {"data_3d_tightest", backward_spec(D, {2, 3, 9, 8, 7}, {4, 3, 3, 2, 3}, {1}, {1, 0, 2}, {2, 1, 1}, 1.0, -0.5), 1.0,
       [](P p) { return p.num_chunks() > 4; }},
      {"data_3d_strided", backward_spec(D, {2, 2, 11, 10, 9}, {3, 2, 3, 3, 3}, {2, 3, 1}, {1, 2, 0}, {1, 1, 2}), 3.0, many},
      {"data_padding_wider_than_kernel", backward_spec(D, {1, 2, 6, 6}, {3, 2, 1, 1}, {1}, {3}), 1.0, many},
      {"data_alpha_zero", backward_spec(D, {2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}, {1}, 0.0, 1.0), 1.0, many},
      // backward filter: dw tiles along k and c; n and space accumulate.
      {"filter_whole_default_budget", backward_spec(F, {2, 3, 9, 8}, {4, 3, 3, 3}, {1}, {1}), 0,
       [](P p) { return p.num_chunks() == 1; }},
      {"filter_n_accumulates", backward_spec(F, {512, 1, 1}, {1, 1, 1}), 1.0, only([](P p) { return p.splits_n > 1; }, 1)},
      {"filter_n_accumulates_beta", backward_spec(F, {9, 2, 40}, {3, 2, 3}, {1}, {1}, {1}, 0.5, 0.75), 1.0,
       [](P p) { return p.splits_n > 1; }},
      {"filter_k_alone", backward_spec(F, {1, 1, 1}, {512, 1, 1}), 1.0, only([](P p) { return p.splits_k > 1; }, 1)},
      {"filter_c_alone_beta", backward_spec(F, {1, 300, 1}, {1, 300, 1}, {1}, {0}, {1}, 1.0, -1.0), 1.0,
       only([](P p) { return p.splits_c > 1; }, 1), true},
      {"filter_d0_stride_dilation_padding", backward_spec(F, {1, 1, 301}, {1, 1, 5}, {2}, {3}, {2}), 1.0,
       only([](P p) { return p.splits_out[0] > 1; }, 1)},
      {"filter_d0_stride3_kernel1", backward_spec(F, {1, 2, 301}, {2, 2, 1}, {3}), 1.0, many},
      {"filter_d1_alone", backward_spec(F, {1, 1, 3, 301}, {1, 1, 3, 3}, {1, 2}, {0, 1}), 1.0,
       only([](P p) { return p.splits_out[1] > 1; }, 1)},
      {"filter_d2_alone", backward_spec(F, {1, 1, 3, 3, 300}, {1, 1, 3, 3, 3}, {1}, {0, 0, 2}, {1, 1, 2}), 1.0,
       only([](P p) { return p.splits_out[2] > 1; }, 1)},
      {"filter_2d_tightest", backward_spec(F, {3, 6, 20, 17}, {5, 6, 3, 3}, {2, 1}, {1}, {1, 2}, 1.5, 0.5), 1.0,
       [](P p) { return p.num_chunks() > 4; }},
      {"filter_3d_tightest", backward_spec(F, {2, 3, 9, 8, 7}, {4, 3, 3, 2, 3}, {1}, {1, 0, 2}, {2, 1, 1}, 1.0, -0.5), 1.0,
       [](P p) { return p.num_chunks() > 4; }},
      {"filter_3d_strided", backward_spec(F, {2, 2, 11, 10, 9}, {3, 2, 3, 3, 3}, {2, 3, 1}, {1, 2, 0}, {1, 1, 2}), 3.0, many},
      // backward bias: db tiles along k; n and space accumulate.
      {"bias_whole", backward_spec(B, {2, 3, 9, 8}, {4, 3, 3, 3}), 0, [](P p) { return p.num_chunks() == 1; }},
      {"bias_n_accumulates", backward_spec(B, {512, 1, 1}, {1, 1, 1}), 1.0, only([](P p) { return p.splits_n > 1; }, 1)},
      {"bias_k_alone_beta", backward_spec(B, {1, 1, 1}, {512, 1, 1}, {1}, {0}, {1}, 2.0, 0.5), 1.0,
       only([](P p) { return p.splits_k > 1; }, 1)},
      {"bias_d0_uneven", backward_spec(B, {1, 1, 700}, {1, 1, 1}), 1.5, only([](P p) { return p.splits_out[0] > 1; }, 1), true},
      {"bias_3d_tightest", backward_spec(B, {3, 2, 9, 8, 7}, {5, 2, 1, 2, 1}, {1}, {0, 1, 0}, {1}, 1.0, -0.25), 1.0,
       [](P p) { return p.num_chunks() > 4; }},
  };
}

}  // namespace ooc_test
