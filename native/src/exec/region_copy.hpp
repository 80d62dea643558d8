// Copies between a strided host tensor and a dense box-shaped buffer, on the host worker pool.
// gather: box may leave the tensor (halo at the border): those elements become zeros.
// scatter: box must lie inside the tensor.
// Trailing dimensions the box covers whole are merged, so a box of whole rows or planes moves as
// long memcpy runs, not element by element.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

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
void scatter_box(const void* src, const TensorView& dst, const Box& box, ThreadPool& pool);

}  // namespace ooc
