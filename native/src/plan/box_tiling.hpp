// Disjoint box tilings of a tensor [n, c, spatial...], shared by the planners whose chunks need no
// halo or only a per-dimension one: the element-wise and per-position layers and pooling
// (layer_planner.cpp) and batch norm (batchnorm_planner.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ooc/plan.hpp"
#include "plan/planner_parts.hpp"

namespace ooc::planner_parts {

using Extent5 = std::array<int64_t, 5>;  // n, c, spatial 0..2

inline int64_t product(const Extent5& e) { return e[0] * e[1] * e[2] * e[3] * e[4]; }

// The tiles worth trying, from the whole tensor down: n is split first, then c, then each spatial
// dim from the outside in, an inner dim only once the outer ones are down to 1, so that a tile
// keeps the longest contiguous runs its size allows. Dims that are not splittable stay whole.
inline std::vector<Extent5> tile_ladder(const Extent5& extent, const std::array<bool, 5>& splittable) {
  std::vector<Extent5> tiles{extent};
  for (int d = 0; d < 5; ++d) {
    if (!splittable[d]) continue;
    for (int64_t t : candidate_tiles(extent[d])) {
      if (t == extent[d]) continue;
      Extent5 next = tiles.back();
      next[d] = t;
      tiles.push_back(next);
    }
  }
  return tiles;
}

// Calls f(chunk) for each tile of `extent` in row-major order (n outermost), with n, c (== k) and
// out set to the tile's box and every tensor loaded.
template <typename F>
void for_each_box(const Extent5& extent, const Extent5& tile, F f) {
  Extent5 splits{};
  for (int d = 0; d < 5; ++d) splits[d] = ceil_div(extent[d], tile[d]);
  const auto range = [&](int64_t i, int d) { return Range{i * tile[d], std::min(extent[d], (i + 1) * tile[d])}; };
  for (int64_t in = 0; in < splits[0]; ++in)
    for (int64_t ic = 0; ic < splits[1]; ++ic)
      for (int64_t i0 = 0; i0 < splits[2]; ++i0)
        for (int64_t i1 = 0; i1 < splits[3]; ++i1)
          for (int64_t i2 = 0; i2 < splits[4]; ++i2) {
            Chunk ch;
            ch.n = range(in, 0);
            ch.c = ch.k = range(ic, 1);
            ch.out = {range(i0, 2), range(i1, 3), range(i2, 4)};
            ch.load_x = ch.load_w = ch.load_y = true;
            f(ch);
          }
}

inline int64_t box_count(const Extent5& extent, const Extent5& tile) {
  int64_t boxes = 1;
  for (int d = 0; d < 5; ++d) boxes *= ceil_div(extent[d], tile[d]);
  return boxes;
}

// The plan's tiling and splits for boxes of `tile` (c and k alike).
inline void set_box_tiling(Plan& plan, const Extent5& extent, const Extent5& tile) {
  plan.tiling.n = tile[0];
  plan.tiling.c = plan.tiling.k = tile[1];
  plan.tiling.out = {tile[2], tile[3], tile[4]};
  plan.splits_n = ceil_div(extent[0], tile[0]);
  plan.splits_c = plan.splits_k = ceil_div(extent[1], tile[1]);
  for (int d = 0; d < 3; ++d) plan.splits_out[d] = ceil_div(extent[2 + d], tile[2 + d]);
}

}  // namespace ooc::planner_parts
