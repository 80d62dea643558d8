// The region copies of channels-last views (TensorView::channels_last, exec/region_copy.hpp): a
// logical box (N, C, spatial...) of a tensor stored N, spatial..., C is gathered into, scattered
// from and DMA-copied to a dense buffer in that physical order, against an element-by-element
// reference; halos outside the tensor are zeros; a box covering C (and the rows after it) whole
// moves as long contiguous runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "exec/region_copy.hpp"
#include "region_copy_reference.hpp"
#include "util/thread_pool.hpp"

namespace {

using ooc::Box;
using ooc::kMaxRank;
using ooc::TensorView;
using Dims = std::array<int64_t, kMaxRank>;
using ooc_test::elements;
using ooc_test::run_copies;

// Element i of the memory holds i + 1 (0 is the halo's).
std::vector<float> iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  return v;
}

// The box's elements in the view's physical order (N, spatial..., C), zero outside the tensor.
std::vector<float> reference_gather(const TensorView& t, const Box& box) {
  std::array<int, kMaxRank> order{0, 1, 2, 3, 4};  // written out here, not taken from dense_order
  for (int i = 1; i < t.rank - 1; ++i) order[i] = i + 1;
  order[t.rank - 1] = 1;
  return ooc_test::reference_gather(t, box, order);
}

Box random_box(std::mt19937& rng, const Dims& shape, int rank, bool inside, int trial) {
  Box b;
  for (int i = 0; i < rank; ++i) {
    const int64_t past = inside ? 0 : 2;
    b.lo[i] = std::uniform_int_distribution<int64_t>(-past, shape[i] - 1)(rng);
    b.hi[i] = std::uniform_int_distribution<int64_t>(b.lo[i] + 1, shape[i] + past)(rng);
    if (inside) b.lo[i] = std::max<int64_t>(b.lo[i], 0);
  }
  if (trial % 3 == 0) {  // C and the innermost spatial dim whole: long runs
    b.lo[1] = 0, b.hi[1] = shape[1];
    b.lo[rank - 1] = 0, b.hi[rank - 1] = shape[rank - 1];
  }
  return b;
}

Dims random_shape(std::mt19937& rng, int rank) {
  Dims s{1, 1, 1, 1, 1};
  for (int i = 0; i < rank; ++i) s[i] = std::uniform_int_distribution<int64_t>(1, 6)(rng);
  return s;
}

TEST(RegionCopyChannelsLast, DenseStridesPutChannelsInnermost) {
  const TensorView t = TensorView::dense(nullptr, {2, 3, 4, 5, 6}, 5, 4, true);
  EXPECT_EQ(t.strides, (Dims{3 * 4 * 5 * 6, 1, 5 * 6 * 3, 6 * 3, 3}));
  const TensorView first = TensorView::dense(nullptr, {2, 3, 4, 5, 6}, 5, 4, false);
  EXPECT_EQ(first.strides, TensorView::contiguous(nullptr, {2, 3, 4, 5, 6}, 5, 4).strides);
  EXPECT_FALSE(first.channels_last);
  EXPECT_EQ(ooc::dense_order(t), (std::array<int, kMaxRank>{0, 2, 3, 4, 1}));
}

TEST(RegionCopyChannelsLast, GatherAndStridedCopiesMatchThePhysicalOrderReference) {
  ooc::ThreadPool pool(3);
  std::mt19937 rng(5);
  for (int rank : {3, 4, 5}) {
    const Dims shape = random_shape(rng, rank);
    const auto data = iota(elements(shape, rank));
    const TensorView t = TensorView::dense(data.data(), shape, rank, 4, true);
    for (int trial = 0; trial < 200; ++trial) {
      const Box b = random_box(rng, shape, rank, false, trial);
      const auto ref = reference_gather(t, b);
      std::vector<float> dst(ref.size() + 16, std::nanf(""));
      ooc::gather_box(t, b, dst.data(), pool);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(dst[i], ref[i]) << "rank " << rank << " element " << i;
      for (size_t i = ref.size(); i < dst.size(); ++i) ASSERT_TRUE(std::isnan(dst[i])) << "wrote past the box";
      // The DMA path: the same buffer (the pipeline zeroes the slot first when the box has a halo).
      std::vector<float> dense(ref.size(), std::nanf(""));
      const ooc::BoxCopies copies = ooc::strided_box_copies(t, b, reinterpret_cast<char*>(dense.data()), true);
      if (!copies.covers_all) std::fill(dense.begin(), dense.end(), 0.0f);
      run_copies(copies);
      ASSERT_EQ(dense, ref) << "rank " << rank;
    }
  }
}

TEST(RegionCopyChannelsLast, ScatterAndStridedCopiesInvertTheGather) {
  ooc::ThreadPool pool(3);
  std::mt19937 rng(7);
  for (int rank : {3, 4, 5}) {
    const Dims shape = random_shape(rng, rank);
    const int64_t n = elements(shape, rank);
    for (int trial = 0; trial < 150; ++trial) {
      const Box b = random_box(rng, shape, rank, true, trial);
      std::vector<float> values(static_cast<size_t>(b.elements(rank)));
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(1000 + i);
      std::vector<float> scattered(static_cast<size_t>(n), -1.0f), copied = scattered;
      ooc::scatter_box(values.data(), TensorView::dense(scattered.data(), shape, rank, 4, true), b, pool);
      const TensorView ct = TensorView::dense(copied.data(), shape, rank, 4, true);
      const ooc::BoxCopies copies = ooc::strided_box_copies(ct, b, reinterpret_cast<char*>(values.data()), false);
      ASSERT_TRUE(copies.covers_all);
      run_copies(copies);
      ASSERT_EQ(copied, scattered);
      // Reading the box back gives the values in the same physical order.
      std::vector<float> back(values.size(), std::nanf(""));
      ooc::gather_box(TensorView::dense(scattered.data(), shape, rank, 4, true), b, back.data(), pool);
      ASSERT_EQ(back, values);
      int64_t untouched = 0;
      for (float v : scattered) untouched += v == -1.0f;
      ASSERT_EQ(untouched, n - b.elements(rank));
    }
  }
}

TEST(RegionCopyChannelsLast, WholeChannelsAndRowsMoveAsLongRuns) {
  // [N=4, C=8, H=10, W=12]: a box of two samples, rows 3-7, C and W whole is five contiguous runs
  // of W * C elements per sample (one 2-D copy per sample), not element by element.
  const Dims shape{4, 8, 10, 12, 1};
  const auto data = iota(elements(shape, 4));
  const TensorView t = TensorView::dense(data.data(), shape, 4, 4, true);
  Box b;
  b.lo = {1, 0, 3, 0, 0};
  b.hi = {3, 8, 8, 12, 1};
  std::vector<float> dense(static_cast<size_t>(b.elements(4)));
  const ooc::BoxCopies copies = ooc::strided_box_copies(t, b, reinterpret_cast<char*>(dense.data()), true);
  ASSERT_EQ(copies.copies.size(), 1u);
  EXPECT_EQ(copies.copies[0].width_bytes, 5u * 12 * 8 * 4);  // rows 3-7 of a sample are contiguous
  run_copies(copies);
  EXPECT_EQ(dense, reference_gather(t, b));
}

TEST(RegionCopyChannelsLast, WindowsKeepTheLayout) {
  ooc::ThreadPool pool(2);
  const Dims shape{2, 3, 7, 6, 1};
  const auto data = iota(elements(shape, 4));
  const TensorView t = TensorView::dense(data.data(), shape, 4, 4, true);
  const TensorView w = t.window({0, 0, 2, 1, 0}, {2, 3, 6, 5, 0});
  ASSERT_TRUE(w.channels_last);
  Box b;  // reaches past the window: zeros there, as past a tensor's border
  b.lo = {0, 0, -1, 0, 0};
  b.hi = {2, 3, 5, 4, 1};
  std::vector<float> got(static_cast<size_t>(b.elements(4)));
  ooc::gather_box(w, b, got.data(), pool);
  EXPECT_EQ(got, reference_gather(w, b));
}

}  // namespace
