// The region-copy tests' references (test_region_copy*.cpp): an element-by-element gather of a
// box in a given dense order, and strided copies run by plain memcpy as a DMA engine would.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/region_copy.hpp"

namespace ooc_test {

// Distinct, exactly representable values: element i holds i + 1 (0 is reserved for the halo).
inline std::vector<float> iota_tensor(int64_t elements) {
  std::vector<float> v(static_cast<size_t>(elements));
  for (int64_t i = 0; i < elements; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  return v;
}

// The element count of the first `rank` dims of `shape`.
inline int64_t elements(const std::array<int64_t, ooc::kMaxRank>& shape, int rank) {
  int64_t e = 1;
  for (int i = 0; i < rank; ++i) e *= shape[i];
  return e;
}

// The box's elements, the last dim of `order` varying fastest (identity: row-major over the box;
// a channels-last view's dense_order: its device buffers' order), zero where the index leaves the
// tensor. Written element by element, independently of the copies under test.
inline std::vector<float> reference_gather(const ooc::TensorView& t, const ooc::Box& box,
                                           std::array<int, ooc::kMaxRank> order = {0, 1, 2, 3, 4}) {
  std::vector<float> out;
  const int r = t.rank;
  std::array<int64_t, ooc::kMaxRank> idx = box.lo;
  if (box.elements(r) == 0) return out;
  for (;;) {
    bool inside = true;
    int64_t off = 0;
    for (int i = 0; i < r; ++i) {
      if (idx[i] < 0 || idx[i] >= t.shape[i]) inside = false;
      off += idx[i] * t.strides[i];
    }
    out.push_back(inside ? static_cast<const float*>(t.data)[off] : 0.0f);
    int i = r - 1;
    while (i >= 0 && ++idx[order[i]] == box.hi[order[i]]) {
      idx[order[i]] = box.lo[order[i]];
      --i;
    }
    if (i < 0) break;
  }
  return out;
}

inline void run_copies(const ooc::BoxCopies& copies) {
  for (const ooc::StridedCopy& c : copies.copies)
    for (size_t z = 0; z < c.depth; ++z)
      for (size_t y = 0; y < c.height; ++y)
        std::memcpy(c.dst + z * c.dst_slice + y * c.dst_pitch, c.src + z * c.src_slice + y * c.src_pitch,
                    c.width_bytes);
}

}  // namespace ooc_test
