// gather_box / scatter_box against an element-by-element reference: boxes inside the tensor,
// straddling each border (zeros outside), fully outside, whole trailing dims (merged into long
// rows), strided views, and the multi-threaded path for large boxes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "exec/region_copy.hpp"
#include "region_copy_reference.hpp"
#include "util/thread_pool.hpp"

namespace {

using ooc::Box;
using ooc::kMaxRank;
using ooc::TensorView;
using Dims = std::array<int64_t, kMaxRank>;
using ooc_test::iota_tensor;
using ooc_test::elements;
using ooc_test::reference_gather;
using ooc_test::run_copies;

Box make_box(const Dims& lo, const Dims& hi) {
  Box b;
  b.lo = lo;
  b.hi = hi;
  return b;
}

std::string box_str(const Box& b, int rank) {
  std::string s;
  for (int i = 0; i < rank; ++i) s += "[" + std::to_string(b.lo[i]) + "," + std::to_string(b.hi[i]) + ")";
  return s;
}

// Makes dims [from, to) of b span `shape` whole: whole trailing dims are what row merging merges.
void make_whole(Box& b, const Dims& shape, int from, int to) {
  for (int i = from; i < to; ++i) {
    b.lo[i] = 0;
    b.hi[i] = shape[i];
  }
}

// A random box of `rank` dims of `shape`: lo in [lo_min, shape + lo_past_end], extent in
// [extent_min, shape + extent_past_end] (parts outside the tensor are halo); every third trial the
// trailing half of the dims whole instead.
struct BoxDraw {
  int64_t lo_min, lo_past_end, extent_min, extent_past_end;
};
Box random_box(std::mt19937& rng, const Dims& shape, int rank, int trial, const BoxDraw& draw) {
  Box b;
  for (int i = 0; i < rank; ++i) {
    b.lo[i] = std::uniform_int_distribution<int64_t>(draw.lo_min, shape[i] + draw.lo_past_end)(rng);
    b.hi[i] = b.lo[i] + std::uniform_int_distribution<int64_t>(draw.extent_min, shape[i] + draw.extent_past_end)(rng);
  }
  if (trial % 3 == 0) make_whole(b, shape, rank / 2, rank);
  return b;
}

// A random tensor shape of `rank` dims, each extent in [1, small_rank_max] for ranks 1 and 2 and
// [1, large_rank_max] beyond (the trailing dims stay 1).
Dims random_shape(std::mt19937& rng, int rank, int64_t small_rank_max, int64_t large_rank_max) {
  Dims shape{1, 1, 1, 1, 1};
  for (int i = 0; i < rank; ++i)
    shape[i] = std::uniform_int_distribution<int64_t>(1, rank <= 2 ? small_rank_max : large_rank_max)(rng);
  return shape;
}

// For each rank from 1 to 5: a random shape (random_shape's bounds) of iota values, and 300 random
// boxes of it (random_box's, by `draw`); calls f(t, shape, rank, trial, box) for each, stopping at
// the first fatal failure.
template <typename F>
void for_random_boxes_of_every_rank(std::mt19937& rng, int64_t small_rank_max, int64_t large_rank_max,
                                    const BoxDraw& draw, F f) {
  for (int rank : {1, 2, 3, 4, 5}) {
    const Dims shape = random_shape(rng, rank, small_rank_max, large_rank_max);
    const auto data = iota_tensor(elements(shape, rank));
    const TensorView t = TensorView::contiguous(data.data(), shape, rank, 4);
    for (int trial = 0; trial < 300; ++trial) {
      f(t, shape, rank, trial, random_box(rng, shape, rank, trial, draw));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// A random non-empty box inside a 5-D `shape`; every fourth trial dims 2-4 whole.
Box random_inside_box(std::mt19937& rng, const Dims& shape, int trial) {
  Box b;
  for (int i = 0; i < 5; ++i) {
    b.lo[i] = std::uniform_int_distribution<int64_t>(0, shape[i] - 1)(rng);
    b.hi[i] = std::uniform_int_distribution<int64_t>(b.lo[i] + 1, shape[i])(rng);
  }
  if (trial % 4 == 0) make_whole(b, shape, 2, 5);
  return b;
}

// Distinct values 1000, 1001, ... for a box's dense buffer (what a scatter writes).
std::vector<float> numbered_box(const Box& b, int rank) {
  std::vector<float> v(static_cast<size_t>(b.elements(rank)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(1000 + i);
  return v;
}

// A [3, 4, 5] window into a [4, 6, 9] tensor: outer strides are not the window's own.
TensorView strided_window(const std::vector<float>& parent) {
  TensorView t = TensorView::contiguous(parent.data() + (1 * 6 + 2) * 9 + 3, {3, 4, 5, 1, 1}, 3, 4);
  t.strides = {54, 9, 1, 0, 0};
  return t;
}

// Gathers into a buffer with guard elements after it and compares with the reference.
void expect_gather_matches(const TensorView& t, const Box& box, ooc::ThreadPool& pool) {
  SCOPED_TRACE("box " + box_str(box, t.rank));
  const std::vector<float> ref = reference_gather(t, box);
  const size_t guard = 64;
  std::vector<float> dst(ref.size() + guard, std::nanf(""));
  ooc::gather_box(t, box, dst.data(), pool);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_EQ(dst[i], ref[i]) << "element " << i << " of the box";
  for (size_t i = ref.size(); i < dst.size(); ++i) ASSERT_TRUE(std::isnan(dst[i])) << "wrote past the box";
}

// Box with the extent [lo, hi) in dim d and `shape` whole in the others.
Box whole_but(const Dims& shape, int d, int64_t lo, int64_t hi) {
  Box b = make_box({0, 0, 0, 0, 0}, shape);
  b.lo[d] = lo;
  b.hi[d] = hi;
  return b;
}

class RegionCopy : public ::testing::Test {
 protected:
  ooc::ThreadPool pool{3};
  // The tensor the border cases gather from: [2, 3, 5, 6, 7], element i holding i + 1.
  const Dims source_shape{2, 3, 5, 6, 7};
  const std::vector<float> source_data = iota_tensor(elements(source_shape, 5));
  const TensorView source = TensorView::contiguous(source_data.data(), source_shape, 5, 4);

  // 200 random boxes inside source_shape (random_inside_box's), each with numbered values to
  // scatter: calls f(box, values), stopping at the first fatal failure.
  template <typename F>
  void for_random_inside_boxes(unsigned seed, F f) {
    std::mt19937 rng(seed);
    for (int trial = 0; trial < 200; ++trial) {
      const Box b = random_inside_box(rng, source_shape, trial);
      SCOPED_TRACE("box " + box_str(b, 5));
      f(b, numbered_box(b, 5));
      if (HasFatalFailure()) return;
    }
  }
};

TEST_F(RegionCopy, GatherInside) {
  const TensorView& t = source;
  expect_gather_matches(t, make_box({0, 0, 0, 0, 0}, source_shape), pool);        // everything: one memcpy
  expect_gather_matches(t, make_box({1, 1, 1, 2, 3}, {2, 3, 4, 5, 6}), pool);     // interior
  expect_gather_matches(t, make_box({0, 1, 0, 0, 0}, {2, 2, 5, 6, 7}), pool);     // whole trailing dims merge
  expect_gather_matches(t, make_box({1, 0, 2, 0, 0}, {2, 3, 4, 6, 7}), pool);     // rows of whole planes
  expect_gather_matches(t, make_box({0, 0, 0, 0, 3}, {2, 3, 5, 6, 4}), pool);     // one column
  expect_gather_matches(t, make_box({1, 2, 4, 5, 6}, {2, 3, 5, 6, 7}), pool);     // one element
  expect_gather_matches(t, make_box({1, 2, 4, 5, 6}, {1, 3, 5, 6, 7}), pool);     // empty box
}

TEST_F(RegionCopy, LongRowsAreSplitIntoPiecesAcrossWorkers) {
  // A few rows of several MiB each (whole samples): the workers share each row in pieces, halo
  // zeros at both ends of the row dimension included, and the scatter writes them back exactly.
  const Dims shape{3, 2, 1, 1, 1 << 20};  // rows of 4 MiB
  const auto data = iota_tensor(elements(shape, 5));
  const TensorView t = TensorView::contiguous(data.data(), shape, 5, 4);
  expect_gather_matches(t, make_box({0, 0, 0, 0, 0}, shape), pool);
  expect_gather_matches(t, make_box({1, 0, 0, 0, -300001}, {3, 2, 1, 1, (1 << 20) + 123457}), pool);
  expect_gather_matches(t, make_box({0, 1, 0, 0, 777}, {2, 2, 1, 1, 999999}), pool);
  const Box b = make_box({0, 0, 0, 0, 12345}, {3, 2, 1, 1, (1 << 20) - 5});
  std::vector<float> dense(static_cast<size_t>(b.elements(5)));
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = -static_cast<float>(i % 1000);
  std::vector<float> target(data.size(), 7.0f);
  const TensorView out = TensorView::contiguous(target.data(), shape, 5, 4);
  ooc::scatter_box(dense.data(), out, b, pool);
  std::vector<float> back(dense.size());
  ooc::gather_box(out, b, back.data(), pool);
  EXPECT_EQ(back, dense);
  EXPECT_EQ(target[0], 7.0f);
  EXPECT_EQ(target.back(), 7.0f);
}

TEST_F(RegionCopy, GatherStraddlingEveryBorder) {
  const TensorView& t = source;
  const Dims& shape = source_shape;
  for (int d = 0; d < 5; ++d) {
    // Low border, high border, and both at once, in dim d only.
    expect_gather_matches(t, whole_but(shape, d, -2, shape[d]), pool);
    expect_gather_matches(t, whole_but(shape, d, 0, shape[d] + 3), pool);
    expect_gather_matches(t, whole_but(shape, d, -1, shape[d] + 3), pool);
    // Partial box in the other dims too.
    Dims lo2{1, 1, 1, 1, 1}, hi2{2, 2, 4, 4, 5};
    lo2[d] = -3;
    hi2[d] = 2;
    expect_gather_matches(t, make_box(lo2, hi2), pool);
  }
  // Every border at once (a halo around the whole tensor).
  expect_gather_matches(t, make_box({-1, -1, -2, -1, -3}, {3, 4, 7, 8, 9}), pool);
}

TEST_F(RegionCopy, GatherFullyOutsideIsZeros) {
  const TensorView& t = source;
  const Dims& shape = source_shape;
  for (int d = 0; d < 5; ++d) {
    expect_gather_matches(t, whole_but(shape, d, -4, 0), pool);                       // entirely before
    expect_gather_matches(t, whole_but(shape, d, shape[d], shape[d] + 2), pool);      // entirely after
    expect_gather_matches(t, whole_but(shape, d, shape[d] + 5, shape[d] + 6), pool);  // far after
  }
}

TEST_F(RegionCopy, GatherRandomBoxesAllRanks) {
  std::mt19937 rng(7);
  const auto check = [&](const TensorView& t, const Dims& /*shape*/, int rank, int trial, const Box& b) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " trial " + std::to_string(trial));
    expect_gather_matches(t, b, pool);
  };
  for_random_boxes_of_every_rank(rng, 17, 6, {-3, 1, 0, 3}, check);
}

TEST_F(RegionCopy, GatherFromStridedView) {
  // Regression: row merging once stopped at the window's first non-contiguous dim and then threw.
  const auto data = iota_tensor(4 * 6 * 9);
  const TensorView t = strided_window(data);
  expect_gather_matches(t, make_box({0, 0, 0}, {3, 4, 5}), pool);    // whole window: rows, not one memcpy
  expect_gather_matches(t, make_box({-1, 1, -2}, {2, 5, 6}), pool);  // halo around part of it
  expect_gather_matches(t, make_box({1, 0, 0}, {3, 4, 5}), pool);
}

TEST_F(RegionCopy, ScatterWritesTheBoxOnly) {
  const int64_t total = elements(source_shape, 5);
  for_random_inside_boxes(11, [&](const Box& b, const std::vector<float>& src) {
    std::vector<float> dst(static_cast<size_t>(total), -1.0f);
    const TensorView t = TensorView::contiguous(dst.data(), source_shape, 5, 4);
    ooc::scatter_box(src.data(), t, b, pool);
    // The box reads back what was scattered; everything else is untouched.
    EXPECT_EQ(reference_gather(t, b), src);
    int64_t untouched = 0;
    for (float v : dst) untouched += v == -1.0f;
    ASSERT_EQ(untouched, total - b.elements(5));
  });
}

TEST_F(RegionCopy, GatherScatterRoundTrip) {
  const Dims shape{3, 4, 6, 5, 8};
  const auto data = iota_tensor(elements(shape, 5));
  const TensorView src = TensorView::contiguous(data.data(), shape, 5, 4);
  std::vector<float> copy(data.size(), 0.0f);
  const TensorView dst = TensorView::contiguous(copy.data(), shape, 5, 4);
  // Tile the tensor with uneven boxes; gather each and scatter it into a zeroed copy.
  for (int64_t a = 0; a < 3; a += 2)
    for (int64_t b = 0; b < 6; b += 4)
      for (int64_t c = 0; c < 8; c += 3) {
        const Box box = make_box({a, 0, b, 0, c}, {std::min<int64_t>(a + 2, 3), 4, std::min<int64_t>(b + 4, 6), 5,
                                                   std::min<int64_t>(c + 3, 8)});
        std::vector<float> buf(static_cast<size_t>(box.elements(5)));
        ooc::gather_box(src, box, buf.data(), pool);
        ooc::scatter_box(buf.data(), dst, box, pool);
      }
  EXPECT_EQ(copy, data);
}

TEST_F(RegionCopy, ScatterOutsideTheTensorIsRejected) {
  const Dims shape{2, 3, 4, 1, 1};
  std::vector<float> dst(24), src(64);
  const TensorView t = TensorView::contiguous(dst.data(), shape, 3, 4);
  EXPECT_THROW(ooc::scatter_box(src.data(), t, make_box({0, 0, -1}, {1, 1, 2}), pool), std::logic_error);
  EXPECT_THROW(ooc::scatter_box(src.data(), t, make_box({0, 0, 0}, {3, 1, 2}), pool), std::logic_error);
  EXPECT_THROW(ooc::gather_box(t, make_box({0, 0, 3}, {1, 1, 2}), src.data(), pool), std::logic_error);  // hi < lo
}

TEST_F(RegionCopy, ParallelPathEqualsSerial) {
  // Boxes over 1 MiB are split across threads; the result must equal one thread's.
  const Dims shape{3, 5, 40, 50, 41};
  const auto data = iota_tensor(elements(shape, 5));
  const TensorView t = TensorView::contiguous(data.data(), shape, 5, 4);
  ooc::ThreadPool serial(1), parallel(4);
  const std::vector<Box> boxes = {
      make_box({0, 0, 0, 0, 0}, shape),                          // whole tensor, one merged row per thread block
      make_box({-1, 0, -3, 0, 0}, {4, 5, 43, 50, 41}),          // halo in outer dims, whole rows
      make_box({0, -1, -2, -2, -3}, {3, 6, 42, 52, 44}),        // halo everywhere
      make_box({1, 1, 5, -1, 0}, {3, 5, 40, 49, 41}),           // partial rows
  };
  for (const Box& b : boxes) {
    SCOPED_TRACE("box " + box_str(b, 5));
    ASSERT_GE(b.elements(5) * 4, int64_t{1} << 20) << "box too small for the parallel path";
    std::vector<float> a(static_cast<size_t>(b.elements(5)), -7.0f), c(a.size(), -9.0f);
    ooc::gather_box(t, b, a.data(), serial);
    ooc::gather_box(t, b, c.data(), parallel);
    ASSERT_EQ(a, c);
    ASSERT_EQ(a, reference_gather(t, b));
    // And back: scatter the in-bounds part in parallel.
    Box inside = b;
    for (int i = 0; i < 5; ++i) {
      inside.lo[i] = std::max<int64_t>(b.lo[i], 0);
      inside.hi[i] = std::min(b.hi[i], shape[i]);
    }
    std::vector<float> part(static_cast<size_t>(inside.elements(5)));
    ooc::gather_box(t, inside, part.data(), parallel);
    std::vector<float> out(data.size(), 0.0f);
    const TensorView o = TensorView::contiguous(out.data(), shape, 5, 4);
    ooc::scatter_box(part.data(), o, inside, parallel);
    EXPECT_EQ(reference_gather(o, inside), part);
  }
}

// strided_box_copies describes the in-tensor part of a box as 3-D strided copies (cudaMemcpy3D's
// model) for direct DMA. Executing them must give what gather_box / scatter_box give.
bool box_inside(const Box& b, const Dims& shape, int rank) {
  for (int i = 0; i < rank; ++i)
    if (b.lo[i] < 0 || b.hi[i] > shape[i]) return false;
  return true;
}

TEST_F(RegionCopy, StridedCopiesToDenseMatchGather) {
  std::mt19937 rng(13);
  const auto check = [&](const TensorView& t, const Dims& shape, int rank, int /*trial*/, const Box& b) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " box " + box_str(b, rank));
    const auto ref = reference_gather(t, b);
    // The caller zeroes the slot when the box is not wholly inside (covers_all false).
    std::vector<float> dense(ref.size() + 16, std::nanf(""));
    const ooc::BoxCopies copies = ooc::strided_box_copies(t, b, reinterpret_cast<char*>(dense.data()), true);
    ASSERT_EQ(copies.covers_all, box_inside(b, shape, rank));
    if (!copies.covers_all) std::fill(dense.begin(), dense.begin() + static_cast<long>(ref.size()), 0.0f);
    run_copies(copies);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(dense[i], ref[i]) << "element " << i;
    for (size_t i = ref.size(); i < dense.size(); ++i) ASSERT_TRUE(std::isnan(dense[i])) << "wrote past the box";
    // Bytes moved: exactly the in-tensor elements.
    size_t moved = 0, inside = 1;
    for (const auto& c : copies.copies) moved += c.width_bytes * c.height * c.depth;
    for (int i = 0; i < rank; ++i)
      inside *= static_cast<size_t>(std::max<int64_t>(0, std::min(b.hi[i], shape[i]) - std::max<int64_t>(b.lo[i], 0)));
    ASSERT_EQ(moved, inside * 4);
  };
  for_random_boxes_of_every_rank(rng, 13, 5, {-2, 0, 1, 2}, check);
}

TEST_F(RegionCopy, StridedCopiesFromDenseMatchScatter) {
  const Dims& shape = source_shape;
  for_random_inside_boxes(17, [&](const Box& b, std::vector<float> src) {
    std::vector<float> via_scatter(static_cast<size_t>(elements(shape, 5)), -1.0f), via_copies = via_scatter;
    ooc::scatter_box(src.data(), TensorView::contiguous(via_scatter.data(), shape, 5, 4), b, pool);
    const TensorView t = TensorView::contiguous(via_copies.data(), shape, 5, 4);
    const ooc::BoxCopies copies = ooc::strided_box_copies(t, b, reinterpret_cast<char*>(src.data()), false);
    EXPECT_TRUE(copies.covers_all);
    run_copies(copies);
    ASSERT_EQ(via_copies, via_scatter);
  });
}

TEST_F(RegionCopy, StridedCopiesFromStridedView) {
  // Regression: same as GatherFromStridedView, for the DMA path.
  const auto data = iota_tensor(4 * 6 * 9);
  const TensorView t = strided_window(data);
  for (const Box& b : {make_box({-1, 1, -2}, {2, 5, 6}), make_box({0, 0, 0}, {3, 4, 5})}) {
    SCOPED_TRACE("box " + box_str(b, 3));
    const auto ref = reference_gather(t, b);
    std::vector<float> dense(ref.size(), 0.0f);
    run_copies(ooc::strided_box_copies(t, b, reinterpret_cast<char*>(dense.data()), true));
    EXPECT_EQ(dense, ref);
  }
}

}  // namespace
