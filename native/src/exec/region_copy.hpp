// Copies between a strided host tensor and a dense box-shaped buffer, on the host worker pool.
// gather: box may leave the tensor (halo at the border): those elements become zeros.
// scatter: box must lie inside the tensor.
// Trailing dimensions the box covers whole are merged, so a box of whole rows or planes moves as
// long memcpy runs, not element by element.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include <vector>

#include "backend/backend.hpp"
#include "exec/thread_pool.hpp"

namespace ooc {

constexpr int kMaxRank = 5;

struct TensorView {
  void* data = nullptr;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements
  size_t element_size = 4;

  static TensorView contiguous(const void* data, const std::array<int64_t, kMaxRank>& shape, int rank,
                               size_t element_size);
};

struct Box {
  std::array<int64_t, kMaxRank> lo{}, hi{};
  int64_t elements(int rank) const;
};

void gather_box(const TensorView& src, const Box& box, void* dst, ThreadPool& pool);

// The part of `box` inside the tensor as 3-D strided copies between the tensor and a dense buffer
// shaped like the whole box (`dense` is its base). For DMA engines: no host thread touches data.
// to_dense: tensor -> dense (H2D) or dense -> tensor (D2H). Returns false if the box has no
// element inside the tensor. `covers_all` tells whether the box lies wholly inside the tensor.
struct BoxCopies {
  std::vector<StridedCopy> copies;
  bool covers_all = true;
};
BoxCopies strided_box_copies(const TensorView& tensor, const Box& box, char* dense, bool to_dense);
void scatter_box(const void* src, const TensorView& dst, const Box& box, ThreadPool& pool);

}  // namespace ooc
