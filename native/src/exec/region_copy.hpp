// Copies between a strided host tensor and a dense box-shaped buffer, on the host worker pool.
// gather: box may leave the tensor (halo at the border): those elements become zeros, or under a
// view's non-zero border mode (a convolution's padding_mode) the element border_source maps them to.
// scatter: box must lie inside the tensor.
// Trailing dimensions the box covers whole are merged, so a box of whole rows or planes moves as
// long memcpy runs, not element by element.
// Views and boxes are in logical coordinates (N, C, spatial... for a convolution's tensors); a
// view marked channels_last holds its boxes' dense buffers in the order N, spatial..., C (dim 1
// last), and every copy below permutes view and box into that order first (the one place the
// layout is translated), so a box covering C whole still moves as long contiguous runs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include <vector>

#include "backend/backend.hpp"
#include "ooc/problem.hpp"
#include "util/thread_pool.hpp"

namespace ooc {

constexpr int kMaxRank = 5;

struct TensorView {
  void* data = nullptr;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements
  size_t element_size = 4;
  // What a gather reads outside the tensor: zeros, or the element border_source maps to (x of a
  // convolution with a padding_mode). Only gather_box computes a non-zero border.
  PaddingMode border = PaddingMode::zeros;
  // Dense buffers of this view's boxes are in the order (0, 2, ..., rank - 1, 1): channels-last.
  // The strides stay the tensor's own, in logical order.
  bool channels_last = false;

  static TensorView contiguous(const void* data, const std::array<int64_t, kMaxRank>& shape, int rank,
                               size_t element_size);
  // A tensor of logical `shape` stored densely in the layout channels_last names (false: the same
  // as contiguous): a channels-last tensor's strides, or a chunk's dense buffer of such a view.
  static TensorView dense(const void* data, const std::array<int64_t, kMaxRank>& shape, int rank,
                          size_t element_size, bool channels_last);
  // The part [lo, hi) of this view (inside it), indexed from lo: same strides, data moved to lo.
  // Copies through a window treat everything outside it as outside the tensor: gathers read zeros
  // there (a window's border is zeros), scatters and strided copies leave it alone.
  TensorView window(const std::array<int64_t, kMaxRank>& lo, const std::array<int64_t, kMaxRank>& hi) const;
};

struct Box {
  std::array<int64_t, kMaxRank> lo{}, hi{};
  int64_t elements(int rank) const;
  bool operator==(const Box& o) const { return lo == o.lo && hi == o.hi; }
  // The part of this box inside [0, shape) (empty boxes have hi == lo in some dimension).
  Box clipped_to(const std::array<int64_t, kMaxRank>& shape, int rank) const;
  Box shifted(const std::array<int64_t, kMaxRank>& origin) const;  // coordinates relative to origin
};

// The index inside [0, size) whose element a padded tensor holds at index i, torch's F.pad rules:
// reflect mirrors about the edge without repeating it (-1 -> 1), replicate repeats the edge (-1 ->
// 0), circular wraps (-1 -> size - 1). -1 for zeros outside [0, size). Each border reaches at most
// one period (ConvProblem::set_padding_mode checks the padding); beyond that it throws logic_error.
int64_t border_source(int64_t i, int64_t size, PaddingMode mode);
// The dimension order of the dense buffers of `view`'s boxes: order[i] is the logical dimension
// stored i-th (identity for channels-first views).
std::array<int, kMaxRank> dense_order(const TensorView& view);

void gather_box(const TensorView& src, const Box& box, void* dst, ThreadPool& pool);

// The part of `box` inside the tensor as 3-D strided copies between the tensor and a dense buffer
// shaped like the whole box (`dense` is its base). For DMA engines: no host thread touches data.
// to_dense: tensor -> dense (H2D) or dense -> tensor (D2H). Returns false if the box has no
// element inside the tensor. `covers_all` tells whether the box lies wholly inside the tensor.
// A view with a non-zero border must not leave the tensor here (logic_error): DMA moves only what
// is there, so the pipeline gathers such a tensor on the host (StreamedInput::host_gather).
struct BoxCopies {
  std::vector<StridedCopy> copies;
  bool covers_all = true;
};
BoxCopies strided_box_copies(const TensorView& tensor, const Box& box, char* dense, bool to_dense);
void scatter_box(const void* src, const TensorView& dst, const Box& box, ThreadPool& pool);

}  // namespace ooc
