// Convolution index arithmetic, in one place: output sizes, the input region (halo included) that
// an output region reads, and its inverse, the output rows that contribute to an input region
// (backward data). Used by the problem checks, the planner and the tests.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ooc/plan.hpp"

namespace ooc {

// Output extent of one spatial dimension; <= 0 when the kernel does not fit the padded input.
// padding_extra: what the end pads beyond `padding` (ConvProblem::padding_extra).
inline int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                                int64_t padding_extra = 0) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t padded = in + 2 * padding + padding_extra;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

// Input indices (unpadded coordinates, may be < 0 or >= in: those read zeros) that output rows
// [out.begin, out.end) read: the slab widened by the halo (out-1)*stride + (kernel-1)*dilation + 1.
inline Range conv_input_range(Range out, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t begin = out.begin * stride - padding;
  const int64_t extent = (out.size() - 1) * stride + (kernel - 1) * dilation + 1;
  return Range{begin, begin + extent};
}

namespace geometry_detail {
// Floor and ceiling of a / b for b > 0 and any sign of a.
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }
}  // namespace geometry_detail

// The inverse of conv_input_range: the smallest range of output rows that holds every row o in
// [0, out) with a tap in input rows `in` (o*stride - padding + j*dilation in `in` for some j <
// kernel): exactly the dy rows that contribute to dx rows `in` (backward data). With dilation >
// stride some rows inside it may still reach no row of `in` (their taps jump over it). Empty
// (begin == end) when no row contributes, e.g. where the stride exceeds the dilated kernel span.
namespace geometry_detail {
// Whether tap j reaches an output row of [0, out) from input rows `in`, and that tap's rows.
inline bool tap_rows(Range in, int64_t out, int64_t j, int64_t stride, int64_t padding, int64_t dilation,
                     int64_t* lo, int64_t* hi) {
  *lo = std::max<int64_t>(0, ceil_div(in.begin + padding - j * dilation, stride));
  *hi = std::min<int64_t>(out, floor_div(in.end - 1 + padding - j * dilation, stride) + 1);
  return *lo < *hi;
}

// Every tap, one by one: what conv_output_range_reading computes for kernels up to kTapLoop.
inline Range output_range_reading_by_taps(Range in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                          int64_t dilation) {
  int64_t first = out, last = 0, lo = 0, hi = 0;
  for (int64_t j = 0; j < kernel; ++j) {  // the rows whose tap j lands in `in`
    if (!tap_rows(in, out, j, stride, padding, dilation, &lo, &hi)) continue;
    first = std::min(first, lo);
    last = std::max(last, hi);
  }
  if (first >= last) return Range{0, 0};
  return Range{first, last};
}

// The same without visiting every tap. A tap's rows only move down as j grows, so `first` is the
// largest reaching tap's lo and `last` the smallest reaching tap's hi. The taps that can reach
// [0, out) at all are [j_min, j_max]; inside, tap j reaches a row when its input window (of
// in.size() rows, clipped to the output's span) holds a multiple of the stride: always when the
// window is at least a stride long or clipped, otherwise periodically in j (period at most the
// stride): a search of one period from either end finds the reaching tap or shows there is none
// short of the clipped ones.
inline Range output_range_reading_by_bounds(Range in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                            int64_t dilation) {
  const int64_t top = (out - 1) * stride;  // the last output row's offset
  const int64_t j_min = std::max<int64_t>(0, ceil_div(in.begin + padding - top, dilation));
  const int64_t j_max = std::min<int64_t>(kernel - 1, floor_div(in.end - 1 + padding, dilation));
  if (out <= 0 || in.size() <= 0 || j_min > j_max) return Range{0, 0};
  int64_t lo = 0, hi = 0;
  const auto reaches = [&](int64_t j) { return tap_rows(in, out, j, stride, padding, dilation, &lo, &hi); };
  const int64_t period = std::min(j_max - j_min + 1, stride);
  int64_t smallest = -1, largest = -1;
  for (int64_t i = 0; i < period && smallest < 0; ++i)
    if (reaches(j_min + i)) smallest = j_min + i;
  for (int64_t i = 0; i < period && largest < 0; ++i)
    if (reaches(j_max - i)) largest = j_max - i;
  if (smallest < 0 || largest < 0) {
    // No tap reaches unclipped; clipped windows hold row 0 or row `out - 1`: the taps whose window
    // starts at or below offset 0, or ends at or past `top`.
    const int64_t low_clip = std::max(j_min, ceil_div(in.begin + padding, dilation));
    const int64_t high_clip = std::min(j_max, floor_div(in.end - 1 + padding - top, dilation));
    if (smallest < 0) smallest = high_clip >= j_min ? j_min : (low_clip <= j_max ? low_clip : -1);
    if (largest < 0) largest = low_clip <= j_max ? j_max : (high_clip >= j_min ? high_clip : -1);
    if (smallest < 0 || largest < 0 || !reaches(smallest) || !reaches(largest)) return Range{0, 0};
  }
  reaches(largest);
  const int64_t first = lo;
  reaches(smallest);
  return Range{first, hi};
}

constexpr int64_t kTapLoop = 4096;
}  // namespace geometry_detail

inline Range conv_output_range_reading(Range in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                       int64_t dilation) {
  if (kernel <= geometry_detail::kTapLoop)
    return geometry_detail::output_range_reading_by_taps(in, out, kernel, stride, padding, dilation);
  return geometry_detail::output_range_reading_by_bounds(in, out, kernel, stride, padding, dilation);
}

// How one chunk of backward data covers dx rows `target` along one split dimension. cuDNN
// computes dx over `computed` (padding 0) from the device's dy rows `dy_rows`; `computed`
// contains `target`, so every target row gets its value: the gradient, or beta * dx where no dy
// row reaches it (stride > dilated kernel span). Of dy_rows only `read` (the contributing rows)
// is loaded; the rest, at most a row before it and a few after, are zeros on the device: they
// exist so that `computed` starts at or before target.begin (the first row whose first tap is
// there) and ends at or after target.end (cuDNN's output size rounds down, so `computed` may end up
// to stride - 1 rows past the last tap). Rows of `computed` outside `target` are discarded; they
// may leave [0, in).
struct BackwardDataRows {
  Range read;      // dy rows loaded: exactly those contributing to target (empty: none does)
  Range dy_rows;   // dy rows on the device, zeros outside `read`; never empty, contains read
  Range computed;  // dx rows cuDNN computes from dy_rows with padding 0; contains target
};

inline BackwardDataRows backward_data_rows(Range target, int64_t out, int64_t kernel, int64_t stride,
                                           int64_t padding, int64_t dilation) {
  using geometry_detail::floor_div;
  BackwardDataRows r;
  r.read = conv_output_range_reading(target, out, kernel, stride, padding, dilation);
  const int64_t first = std::min(floor_div(target.begin + padding, stride), out - 1);
  const int64_t last = std::min<int64_t>(out, floor_div(target.end - 1 + padding, stride) + 1);
  if (r.read.size() == 0) r.read = Range{last, last};
  r.dy_rows = Range{std::min(first, r.read.begin), std::max(last, r.read.end)};
  const Range natural = conv_input_range(r.dy_rows, kernel, stride, padding, dilation);
  r.computed = Range{natural.begin, std::max(natural.end, target.end)};
  return r;
}

// Groups: a grouped convolution's K output channels and C input channels form `groups` blocks of
// K / groups and C / groups; output channel block g reads input block g only, through w's rows of
// block g (w is [K, C / groups, kernel...]). Planners tile a grouped convolution along three
// dimensions instead of K and C: g (whole groups per tile), and k and c *inside* a group tile.
// A tile of several groups holds their channels whole (k and c not split), or its x region would
// not be a box; a tile of one group may split its k and c like an ungrouped convolution. With
// groups == 1 the g dimension has one tile and k, c tile K and C as always.
struct GroupedChannels {
  int64_t per_group = 1;  // channels of one group: K / groups or C / groups

  // The channels of group tile `groups` (a range of group indices) and, inside it, `within` (a
  // range of [0, per_group), whole when the tile holds several groups).
  Range channels(Range groups, Range within) const {
    return Range{groups.begin * per_group + within.begin, (groups.end - 1) * per_group + within.end};
  }
};

// How many whole groups a chunk's channel range spans (1 for a range inside one group): the group
// count of its chunk convolution.
inline int64_t groups_spanned(Range channels, int64_t per_group) {
  return std::max<int64_t>(1, channels.size() / per_group);
}

// w's columns (its second dimension, C / groups wide) that a chunk over input channels `c` reads:
// relative to c's first group, at most one group wide.
inline Range w_columns(Range c, int64_t c_per_group) {
  const int64_t begin = c.begin % c_per_group;
  return Range{begin, begin + std::min(c.size(), c_per_group)};
}

}  // namespace ooc
