// The regions a convolution's chunks move, by tensor family (plan.hpp: x-, w-, y- and bias-shaped
// tensors): shared by the convolution pipelines and the fused ones.
#pragma once

#include <array>

#include "exec/chunk_pipeline.hpp"
#include "exec/region_copy.hpp"
#include "plan/conv_geometry.hpp"

namespace ooc::conv_regions {

using Extent = std::array<int64_t, kMaxRank>;

// The tensor families of plan.hpp: every operation streams tensors shaped like x, w, y or bias.
enum class Family { x, w, y, bias };

// A tensor of family f holding elements of `dtype`, stored in the problem's layout (an operation's output may be float32 where
// its inputs are half: ConvProblem::output_dtype).
inline TensorView view_of(const ConvProblem& p, Family f, const void* data, DType dtype) {
  Extent shape{};
  switch (f) {
    case Family::x: shape = {p.n, p.c, p.in[0], p.in[1], p.in[2]}; break;
    case Family::w: shape = {p.k, p.c / p.groups, p.kernel[0], p.kernel[1], p.kernel[2]}; break;
    case Family::y: shape = {p.n, p.k, p.out[0], p.out[1], p.out[2]}; break;
    case Family::bias: shape = {p.k, 1, 1, 1, 1}; break;
  }
  // x, w and y are dense in the problem's layout (the bias, a vector, in either).
  const bool channels_last = p.layout == Layout::channels_last && f != Family::bias;
  TensorView v = TensorView::dense(data, shape, 5, dtype_size(dtype), channels_last);
  if (f == Family::x) v.border = p.padding_mode;  // what x's halo holds past the tensor's border
  return v;
}
inline TensorView view_of(const ConvProblem& p, Family f, const void* data) { return view_of(p, f, data, p.dtype); }

inline Box box_of(Range a, Range b, const std::array<Range, kMaxSpatial>& spatial) {
  Box box;
  box.lo = {a.begin, b.begin, spatial[0].begin, spatial[1].begin, spatial[2].begin};
  box.hi = {a.end, b.end, spatial[0].end, spatial[1].end, spatial[2].end};
  return box;
}

// A chunk's region of a tensor of family f.
inline Region region_of(const TensorView& v, Family f, const Chunk& ch, const ConvProblem& p) {
  switch (f) {
    case Family::x: return {v, box_of(ch.n, ch.c, ch.in)};
    case Family::y: return {v, box_of(ch.n, ch.k, ch.out)};
    case Family::w:
      return {v, box_of(ch.k, w_columns(ch.c, p.c / p.groups),
                        {Range{0, p.kernel[0]}, Range{0, p.kernel[1]}, Range{0, p.kernel[2]}})};
    case Family::bias: break;
  }
  return {v, box_of(ch.k, Range{0, 1}, {Range{0, 1}, Range{0, 1}, Range{0, 1}})};
}

// `region` seen through the window of its view over the whole first two dims x `spatial`: only
// that part is read (zeros elsewhere) or written back.
inline Region through_window(const Region& region, const std::array<Range, kMaxSpatial>& spatial) {
  const Extent lo{0, 0, spatial[0].begin, spatial[1].begin, spatial[2].begin};
  const Extent hi{region.view.shape[0], region.view.shape[1], spatial[0].end, spatial[1].end, spatial[2].end};
  return {region.view.window(lo, hi), region.box.shifted(lo)};
}

}  // namespace ooc::conv_regions
