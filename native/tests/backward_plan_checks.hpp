// The gradients' plan helpers: the problems (BackwardSpec), float64 references written
// independently of the library, and the properties every backward plan must have.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ooc/ooc.hpp"
#include "plan_checks.hpp"
#include "test_util.hpp"

namespace ooc_test {

using ooc::Operation;

// A backward problem: the forward geometry (x, w, stride, padding, dilation) and which gradient.
struct BackwardSpec {
  Operation op = Operation::backward_data;
  Shape x, w, stride{1}, padding{0}, dilation{1};
  double alpha = 1.0, beta = 0.0;
  int64_t groups = 1;

  ooc::ConvProblem forward() const {
    return ooc::ConvProblem::forward(x, w, stride, padding, dilation, groups, 1, 0, false);
  }
  ooc::ConvProblem problem() const {
    const Shape y = forward().y_shape();
    switch (op) {
      case Operation::backward_data:
        return ooc::ConvProblem::backward_data(y, w, x, stride, padding, dilation, groups, alpha, beta);
      case Operation::backward_filter:
        return ooc::ConvProblem::backward_filter(x, y, w, stride, padding, dilation, groups, alpha, beta);
      case Operation::backward_bias:
        return ooc::ConvProblem::backward_bias(y, alpha, beta);
      default:
        throw std::logic_error("BackwardSpec: not a backward operation");
    }
  }
};

// The gradient `op` of the convolution x (*) w, with its blending.
inline BackwardSpec backward_spec(Operation op, Shape x, Shape w, Shape stride = {1}, Shape padding = {0},
                                  Shape dilation = {1}, double alpha = 1.0, double beta = 0.0) {
  BackwardSpec s;
  s.op = op;
  s.x = std::move(x), s.w = std::move(w), s.stride = std::move(stride), s.padding = std::move(padding);
  s.dilation = std::move(dilation);
  s.alpha = alpha, s.beta = beta;
  return s;
}

inline const char* op_label(Operation op) {
  return op == Operation::backward_data ? "data" : op == Operation::backward_filter ? "filter" : "bias";
}

// --------------------------------------------------------------------------------------------
// float64 references (direct loops over every tap, unpadded coordinates, bounds checked per tap)

// Calls fn(x index, w index, y index) for every product the convolution of `p` forms. Grouped:
// output channel k of group k / (K / G) reads that group's input channels only, through w[k, j]
// for its j-th one.
template <typename Fn>
void for_each_product(const ooc::ConvProblem& p, Fn fn) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t j = 0; j < cg; ++j) {
        const int64_t c = k / kg * cg + j;
        for (int64_t o0 = 0; o0 < p.out[0]; ++o0)
          for (int64_t o1 = 0; o1 < p.out[1]; ++o1)
            for (int64_t o2 = 0; o2 < p.out[2]; ++o2)
              for (int64_t a = 0; a < p.kernel[0]; ++a)
                for (int64_t b = 0; b < p.kernel[1]; ++b)
                  for (int64_t e = 0; e < p.kernel[2]; ++e) {
                    const int64_t i0 = o0 * p.stride[0] + a * p.dilation[0] - p.padding[0];
                    const int64_t i1 = o1 * p.stride[1] + b * p.dilation[1] - p.padding[1];
                    const int64_t i2 = o2 * p.stride[2] + e * p.dilation[2] - p.padding[2];
                    if (i0 < 0 || i0 >= p.in[0] || i1 < 0 || i1 >= p.in[1] || i2 < 0 || i2 >= p.in[2]) continue;
                    const size_t xi = static_cast<size_t>((((n * p.c + c) * p.in[0] + i0) * p.in[1] + i1) * p.in[2] + i2);
                    const size_t wi = static_cast<size_t>((((k * cg + j) * p.kernel[0] + a) * p.kernel[1] + b) *
                                                              p.kernel[2] + e);
                    const size_t yi =
                        static_cast<size_t>((((n * p.k + k) * p.out[0] + o0) * p.out[1] + o1) * p.out[2] + o2);
                    fn(xi, wi, yi);
                  }
      }
}

inline std::vector<double> blended(std::vector<double> acc, const ooc::ConvProblem& p, const std::vector<float>& old) {
  for (size_t i = 0; i < acc.size(); ++i) {
    acc[i] *= p.alpha;
    if (p.beta != 0.0) acc[i] += p.beta * static_cast<double>(old[i]);
  }
  return acc;
}

// dx = alpha * conv_transpose(dy, w) + beta * dx_old
inline std::vector<double> reference_backward_data(const ooc::ConvProblem& p, const std::vector<float>& dy,
                                                   const std::vector<float>& w, const std::vector<float>& dx_old) {
  std::vector<double> dx(static_cast<size_t>(p.x_elements()), 0.0);
  for_each_product(p, [&](size_t xi, size_t wi, size_t yi) { dx[xi] += double(w[wi]) * double(dy[yi]); });
  return blended(std::move(dx), p, dx_old);
}

// dw = alpha * sum over n, out of dy * x + beta * dw_old
inline std::vector<double> reference_backward_filter(const ooc::ConvProblem& p, const std::vector<float>& x,
                                                     const std::vector<float>& dy, const std::vector<float>& dw_old) {
  std::vector<double> dw(static_cast<size_t>(p.w_elements()), 0.0);
  for_each_product(p, [&](size_t xi, size_t wi, size_t yi) { dw[wi] += double(x[xi]) * double(dy[yi]); });
  return blended(std::move(dw), p, dw_old);
}

// db = alpha * sum over n, out of dy + beta * db_old
inline std::vector<double> reference_backward_bias(const ooc::ConvProblem& p, const std::vector<float>& dy,
                                                   const std::vector<float>& db_old) {
  std::vector<double> db(static_cast<size_t>(p.k), 0.0);
  const int64_t plane = p.out[0] * p.out[1] * p.out[2];
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t i = 0; i < plane; ++i) db[static_cast<size_t>(k)] += dy[static_cast<size_t>((n * p.k + k) * plane + i)];
  return blended(std::move(db), p, db_old);
}

// The gradient p.op computes from the forward's x, w and dy (dx, dw or db), blended with `old`.
inline std::vector<double> reference_gradient(const ooc::ConvProblem& p, const std::vector<float>& x,
                                              const std::vector<float>& w, const std::vector<float>& dy,
                                              const std::vector<float>& old) {
  switch (p.op) {
    case Operation::backward_data: return reference_backward_data(p, dy, w, old);
    case Operation::backward_filter: return reference_backward_filter(p, x, dy, old);
    default: return reference_backward_bias(p, dy, old);
  }
}

// How many floats the gradient p.op writes: dx's, dw's or db's.
inline int64_t gradient_elements(const ooc::ConvProblem& p) {
  switch (p.op) {
    case Operation::backward_data: return p.x_elements();
    case Operation::backward_filter: return p.w_elements();
    default: return p.k;
  }
}

// A gradient call's tensors in the C API's argument order, drawn by random(count): its inputs
// (data: w, dy; filter: x, dy; bias: dy), then the output's old values (beta may blend them).
template <typename Random>
std::vector<std::vector<float>> gradient_call_tensors(const ooc::ConvProblem& p, Random random) {
  std::vector<std::vector<float>> tensors;
  switch (p.op) {
    case Operation::backward_data: tensors = {random(p.w_elements()), random(p.y_elements())}; break;
    case Operation::backward_filter: tensors = {random(p.x_elements()), random(p.y_elements())}; break;
    default: tensors = {random(p.y_elements())}; break;
  }
  tensors.push_back(random(gradient_elements(p)));
  return tensors;
}

// --------------------------------------------------------------------------------------------
// plan properties

// The dy rows that contribute to dx rows `target`, found by trying every row and tap (independent
// of the library's conv_output_range_reading): {first, last + 1}, or an empty range.
inline std::pair<int64_t, int64_t> contributing_rows(ooc::Range target, int64_t out, int64_t kernel, int64_t stride,
                                                     int64_t padding, int64_t dilation) {
  int64_t first = -1, last = -1;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < kernel; ++j) {
      const int64_t i = o * stride - padding + j * dilation;
      if (i >= target.begin && i < target.end) {
        if (first < 0) first = o;
        last = o;
      }
    }
  return first < 0 ? std::make_pair<int64_t, int64_t>(0, 0) : std::make_pair(first, last + 1);
}

// cuDNN's output size for an input of `in` rows (the forward formula, written out here again).
inline int64_t cudnn_output_rows(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t span = (kernel - 1) * dilation + 1;
  return in + 2 * padding < span ? 0 : (in + 2 * padding - span) / stride + 1;
}

inline int64_t product3(const std::array<ooc::Range, ooc::kMaxSpatial>& r) {
  return r[0].size() * r[1].size() * r[2].size();
}

// Everything a backward plan must satisfy. count_elements: also check coverage element by element.
inline void check_backward_plan(const ooc::Plan& plan, bool count_elements) {
  const ooc::ConvProblem& p = plan.problem;
  const Operation op = p.op;
  const auto& chunks = plan.chunks;
  ASSERT_FALSE(chunks.empty());
  ASSERT_EQ(static_cast<int64_t>(chunks.size()),
            plan.splits_n * plan.splits_k * plan.splits_c * plan.splits_out[0] * plan.splits_out[1] * plan.splits_out[2]);
  const bool data = op == Operation::backward_data, filter = op == Operation::backward_filter;
  const bool bias = op == Operation::backward_bias;

  // --- budget and slots ---
  EXPECT_LE(plan.peak_device_bytes, plan.memory_limit);
  EXPECT_EQ(plan.peak_device_bytes, plan.x_buffers * plan.x_slot_bytes + plan.w_buffers * plan.w_slot_bytes +
                                        plan.y_buffers * plan.y_slot_bytes + plan.bias_bytes + plan.workspace_bytes);
  for (size_t s : {plan.x_slot_bytes, plan.w_slot_bytes, plan.y_slot_bytes, plan.bias_bytes})
    EXPECT_EQ(s % 256, 0u) << "device slots are 256-byte aligned";
  if (bias) {
    EXPECT_EQ(plan.x_buffers + plan.w_buffers, 0);
    EXPECT_EQ(plan.workspace_bytes, 0u);
  } else {
    EXPECT_EQ(plan.bias_bytes, 0u);
  }
  EXPECT_EQ(plan.w_buffers > 0, !bias);
  EXPECT_EQ(plan.x_buffers > 0, !bias);

  // --- per-dimension tiling: n, k, c, and spatial tiles (dx targets for data, dy for the others) ---
  std::set<std::pair<int64_t, int64_t>> rn, rk, rc, rs[ooc::kMaxSpatial];
  for (const ooc::Chunk& ch : chunks) {
    rn.insert({ch.n.begin, ch.n.end});
    rk.insert({ch.k.begin, ch.k.end});
    rc.insert({ch.c.begin, ch.c.end});
    for (int d = 0; d < ooc::kMaxSpatial; ++d) {
      const ooc::Range r = data ? ch.target[d] : ch.out[d];
      rs[d].insert({r.begin, r.end});
    }
  }
  check_dimension_ranges(rn, p.n, plan.tiling.n, plan.splits_n, "n");
  check_dimension_ranges(rk, p.k, plan.tiling.k, plan.splits_k, "k");
  check_dimension_ranges(rc, p.c, plan.tiling.c, plan.splits_c, "c");
  for (int d = 0; d < ooc::kMaxSpatial; ++d)
    check_dimension_ranges(rs[d], data ? p.in[d] : p.out[d], plan.tiling.out[d], plan.splits_out[d], "spatial");
  if (bias) {
    EXPECT_EQ(plan.splits_c, 1);
  }
  if (::testing::Test::HasFatalFailure()) return;

  // --- output tiles and their reductions: consecutive chunks, first/last flags, each tile once ---
  using Key = std::vector<int64_t>;
  auto output_key = [&](const ooc::Chunk& ch) -> Key {
    if (data)
      return {ch.n.begin, ch.c.begin, ch.target[0].begin, ch.target[1].begin, ch.target[2].begin};
    if (filter) return {ch.k.begin, ch.c.begin};
    return {ch.k.begin};
  };
  // One unit of the reduction: k for data; n and the dy tile for filter and bias.
  auto reduction_key = [&](const ooc::Chunk& ch) -> Key {
    if (data) return {ch.k.begin};
    return {ch.n.begin, ch.out[0].begin, ch.out[1].begin, ch.out[2].begin};
  };
  const int64_t reduction_units = data ? plan.splits_k
                                       : plan.splits_n * plan.splits_out[0] * plan.splits_out[1] * plan.splits_out[2];
  std::set<Key> finished;
  std::set<Key> units;
  const ooc::Chunk* prev = nullptr;
  size_t h2d = 0;
  int64_t loads_x = 0, loads_w = 0, loads_y = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ooc::Chunk& ch = chunks[i];
    SCOPED_TRACE("chunk " + std::to_string(i) + ": " + describe_chunk(ch));
    const Key key = output_key(ch);
    if (ch.first_c) {
      ASSERT_EQ(finished.count(key), 0u) << "output tile started again after it was written";
      units.clear();
    } else {
      ASSERT_NE(prev, nullptr);
      ASSERT_EQ(output_key(*prev), key) << "chunks of one output tile are not consecutive";
      ASSERT_FALSE(prev->last_c);
    }
    ASSERT_TRUE(units.insert(reduction_key(ch)).second) << "reduction unit computed twice";
    if (ch.last_c) {
      ASSERT_EQ(static_cast<int64_t>(units.size()), reduction_units) << "reduction incomplete at its last chunk";
      ASSERT_TRUE(finished.insert(key).second) << "output tile written twice";
    }

    // Regions per spatial dim.
    for (int d = 0; d < ooc::kMaxSpatial; ++d) {
      SCOPED_TRACE("dim " + std::to_string(d));
      const int64_t k = p.kernel[d], s = p.stride[d], pad = p.padding[d], dil = p.dilation[d];
      if (data) {
        if (plan.splits_out[d] == 1) {
          EXPECT_EQ(ch.target[d], (ooc::Range{0, p.in[d]}));
          EXPECT_EQ(ch.in[d], (ooc::Range{0, p.in[d]}));
          EXPECT_EQ(ch.out[d], (ooc::Range{0, p.out[d]}));
          EXPECT_EQ(ch.out_read[d], (ooc::Range{0, p.out[d]}));
          EXPECT_EQ(ch.compute_padding[d], pad);
        } else {
          const auto rows = contributing_rows(ch.target[d], p.out[d], k, s, pad, dil);
          if (rows.first < rows.second) {
            EXPECT_EQ(ch.out_read[d], (ooc::Range{rows.first, rows.second})) << "dy rows read != contributing rows";
          } else {
            EXPECT_EQ(ch.out_read[d].size(), 0) << "dy rows read where none contributes";
          }
          EXPECT_EQ(ch.compute_padding[d], 0);
          // out holds out_read, starts at most one row before it, stays inside dy.
          EXPECT_GE(ch.out[d].begin, 0);
          EXPECT_LE(ch.out[d].end, p.out[d]);
          EXPECT_GT(ch.out[d].size(), 0);
          EXPECT_LE(ch.out[d].begin, ch.out_read[d].begin);
          EXPECT_GE(ch.out[d].end, ch.out_read[d].end);
          // The computed dx region is where the device's dy rows land, and holds the target.
          EXPECT_EQ(ch.in[d].begin, ch.out[d].begin * s - pad);
          EXPECT_LE(ch.in[d].begin, ch.target[d].begin);
          EXPECT_GE(ch.in[d].end, ch.target[d].end);
          EXPECT_EQ(cudnn_output_rows(ch.in[d].size(), k, s, 0, dil), ch.out[d].size())
              << "cuDNN would compute a different number of dy rows from this dx region";
        }
      } else {
        if (plan.splits_out[d] == 1) {
          EXPECT_EQ(ch.out[d], (ooc::Range{0, p.out[d]}));
          EXPECT_EQ(ch.in[d], (ooc::Range{0, p.in[d]}));
          EXPECT_EQ(ch.compute_padding[d], pad);
        } else {
          EXPECT_EQ(ch.in[d], expected_input_range(ch.out[d], k, s, pad, dil));
          EXPECT_EQ(ch.compute_padding[d], 0);
        }
      }
    }

    // Element limits and slots.
    const int64_t xe = ch.n.size() * ch.c.size() * product3(ch.in);
    const int64_t ye = ch.n.size() * ch.k.size() * product3(ch.out);
    const int64_t we = ch.k.size() * ch.c.size() * p.kernel[0] * p.kernel[1] * p.kernel[2];
    EXPECT_LT(ye, kTwoTo31);
    EXPECT_LE(static_cast<size_t>(ye) * 4, plan.y_slot_bytes);
    if (!bias) {
      EXPECT_LT(xe, kTwoTo31);
      EXPECT_LT(we, kTwoTo31);
      EXPECT_LE(static_cast<size_t>(xe) * 4, plan.x_slot_bytes);
      EXPECT_LE(static_cast<size_t>(we) * 4, plan.w_slot_bytes);
    } else {
      EXPECT_LE(static_cast<size_t>(ch.k.size()) * 4, plan.bias_bytes / plan.bias_buffers);
    }

    // Loads: exactly when the tile differs from the previous chunk's (dy's tile for backward data
    // is its target's: two targets may share dy rows, but not always the rows read); the staged
    // traffic is the loaded regions' bytes, plus the output's old values (beta != 0) at the start
    // of each output tile.
    const bool same_x = prev && prev->n == ch.n && prev->c == ch.c && prev->in == ch.in;
    const bool same_y = prev && prev->n == ch.n && prev->k == ch.k && prev->out == ch.out &&
                        (!data || prev->target == ch.target);
    const bool same_w = prev && prev->k == ch.k && prev->c == ch.c;
    EXPECT_EQ(ch.load_x, filter && !same_x);
    EXPECT_EQ(ch.load_y, !same_y);
    EXPECT_EQ(ch.load_w, data && !same_w);
    if (ch.load_x) h2d += static_cast<size_t>(xe) * 4, ++loads_x;
    if (ch.load_y) h2d += static_cast<size_t>(ye) * 4, ++loads_y;
    if (ch.load_w) h2d += static_cast<size_t>(we) * 4, ++loads_w;
    if (ch.first_c && p.beta != 0.0)
      h2d += 4 * static_cast<size_t>(data ? xe : filter ? we : ch.k.size());
    if (::testing::Test::HasFailure()) return;
    prev = &ch;
  }
  const int64_t output_tiles = data ? plan.splits_n * plan.splits_c * plan.splits_out[0] * plan.splits_out[1] *
                                          plan.splits_out[2]
                                    : filter ? plan.splits_k * plan.splits_c : plan.splits_k;
  EXPECT_EQ(static_cast<int64_t>(finished.size()), output_tiles);

  // --- traffic and slot counts ---
  EXPECT_EQ(plan.bytes_h2d, h2d);
  EXPECT_EQ(plan.bytes_d2h, static_cast<size_t>(gradient_elements(p)) * 4);
  auto slots = [&](int64_t loads) { return static_cast<int>(std::min<int64_t>(plan.buffers, loads)); };
  EXPECT_EQ(plan.y_buffers, slots(loads_y));
  if (data) {
    EXPECT_EQ(plan.w_buffers, slots(loads_w));
    EXPECT_EQ(plan.x_buffers, slots(output_tiles));
    EXPECT_EQ(plan.w_resident, loads_w == 1);
  } else if (filter) {
    EXPECT_EQ(plan.x_buffers, slots(loads_x));
    EXPECT_EQ(plan.w_buffers, slots(output_tiles));
  } else {
    EXPECT_EQ(plan.bias_buffers, slots(output_tiles));
  }

  // --- element by element: each output element written by exactly one last chunk; every product
  // (output element x reduction element) accumulated exactly once ---
  if (count_elements) {
    if (data) {
      std::vector<uint8_t> count(static_cast<size_t>(p.x_elements()), 0);
      std::vector<uint16_t> reduced(static_cast<size_t>(p.x_elements() * p.k), 0);
      for (const ooc::Chunk& ch : chunks)
        for_each_box_index(ch.n, ch.c, ch.target, p.c, p.in, [&](size_t i) {
          if (ch.last_c && count[i] < 255) ++count[i];
          for (int64_t k = ch.k.begin; k < ch.k.end; ++k) ++reduced[i * static_cast<size_t>(p.k) + k];
        });
      EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](uint8_t v) { return v == 1; }))
          << "a dx element is written back never or more than once";
      EXPECT_TRUE(std::all_of(reduced.begin(), reduced.end(), [](uint16_t v) { return v == 1; }))
          << "a dx element does not accumulate every k exactly once";
    } else {
      const int64_t outputs = filter ? p.k * p.c : p.k;
      const int64_t plane = p.out[0] * p.out[1] * p.out[2];
      std::vector<uint8_t> count(static_cast<size_t>(outputs), 0);
      std::vector<uint16_t> reduced(static_cast<size_t>(outputs * p.n * plane), 0);
      for (const ooc::Chunk& ch : chunks)
        for (int64_t k = ch.k.begin; k < ch.k.end; ++k)
          for (int64_t c = filter ? ch.c.begin : 0; c < (filter ? ch.c.end : 1); ++c) {
            const int64_t o = filter ? k * p.c + c : k;
            if (ch.last_c && count[static_cast<size_t>(o)] < 255) ++count[static_cast<size_t>(o)];
            for (int64_t n = ch.n.begin; n < ch.n.end; ++n)
              for (int64_t a = ch.out[0].begin; a < ch.out[0].end; ++a)
                for (int64_t b = ch.out[1].begin; b < ch.out[1].end; ++b)
                  for (int64_t e = ch.out[2].begin; e < ch.out[2].end; ++e)
                    ++reduced[static_cast<size_t>((o * p.n + n) * plane + (a * p.out[1] + b) * p.out[2] + e)];
          }
      EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](uint8_t v) { return v == 1; }))
          << "an output element is written back never or more than once";
      EXPECT_TRUE(std::all_of(reduced.begin(), reduced.end(), [](uint16_t v) { return v == 1; }))
          << "an output element does not reduce every (n, dy position) exactly once";
    }
  }
}

}  // namespace ooc_test
