// A convolution's padding_mode is computed by the gather of x's halo (exec/region_copy.hpp):
// border_source against torch's F.pad tables, and gather_box of views with a border mode against
// an element-by-element reference built the way np.pad builds its padding (an independent
// construction: explicit index lists, not the library's formula), for every rank, boxes leaving
// the tensor at either end of any dimension by up to one period, serial and parallel; DMA refuses
// such a box and windows read zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/region_copy.hpp"
#include "region_copy_reference.hpp"
#include "util/thread_pool.hpp"

namespace {

using ooc::Box;
using ooc::kMaxRank;
using ooc::PaddingMode;
using ooc::TensorView;
using Dims = std::array<int64_t, kMaxRank>;
using ooc_test::iota_tensor;
using ooc_test::elements;

constexpr PaddingMode kModes[] = {PaddingMode::reflect, PaddingMode::replicate, PaddingMode::circular};

// What each side may pad under `mode` for a dimension of `size` (torch: reflect < size, circular
// <= size; replicate any, kept small here).
int64_t max_pad(PaddingMode mode, int64_t size) {
  switch (mode) {
    case PaddingMode::reflect: return size - 1;
    case PaddingMode::circular: return size;
    default: return 8;
  }
}

// The source index of every padded position -before .. size + after - 1, as np.pad lays the padding
// out: reflect appends the mirrored interior without the edge, replicate repeats the edge value,
// circular (np's 'wrap') copies the other end.
std::vector<int64_t> padded_indices(int64_t size, int64_t before, int64_t after, PaddingMode mode) {
  std::vector<int64_t> left, right, out;
  for (int64_t k = 1; k <= before; ++k)  // k-th element before the start, nearest first
    left.push_back(mode == PaddingMode::reflect ? k : mode == PaddingMode::replicate ? 0 : size - k);
  for (int64_t k = 1; k <= after; ++k)  // k-th element after the end, nearest first
    right.push_back(mode == PaddingMode::reflect ? size - 1 - k : mode == PaddingMode::replicate ? size - 1 : k - 1);
  out.assign(left.rbegin(), left.rend());
  for (int64_t i = 0; i < size; ++i) out.push_back(i);
  out.insert(out.end(), right.begin(), right.end());
  return out;
}

// Element-by-element gather of a padded tensor: each index goes through its dimension's padded
// index list (the box lies within [-pad, size + pad) of each dimension, pad = max_pad).
std::vector<float> reference_gather(const TensorView& t, const Box& box) {
  std::vector<std::vector<int64_t>> lists;
  std::vector<int64_t> pads;
  for (int i = 0; i < t.rank; ++i) {
    const int64_t pad = max_pad(t.border, t.shape[i]);
    lists.push_back(padded_indices(t.shape[i], pad, pad, t.border));
    pads.push_back(pad);
  }
  std::vector<float> out;
  if (box.elements(t.rank) == 0) return out;
  Dims idx = box.lo;
  for (;;) {
    int64_t off = 0;
    for (int i = 0; i < t.rank; ++i) off += lists[i].at(static_cast<size_t>(idx[i] + pads[i])) * t.strides[i];
    out.push_back(static_cast<const float*>(t.data)[off]);
    int i = t.rank - 1;
    while (i >= 0 && ++idx[i] == box.hi[i]) {
      idx[i] = box.lo[i];
      --i;
    }
    if (i < 0) break;
  }
  return out;
}

std::string describe(const Box& b, int rank, PaddingMode mode) {
  std::string s = ooc::padding_mode_name(mode) + std::string(" box ");
  for (int i = 0; i < rank; ++i) s += "[" + std::to_string(b.lo[i]) + "," + std::to_string(b.hi[i]) + ")";
  return s;
}

void expect_gather_matches(const TensorView& t, const Box& box, ooc::ThreadPool& pool) {
  SCOPED_TRACE(describe(box, t.rank, t.border));
  const std::vector<float> ref = reference_gather(t, box);
  const size_t guard = 16;
  std::vector<float> dst(ref.size() + guard, std::nanf(""));
  ooc::gather_box(t, box, dst.data(), pool);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(dst[i], ref[i]) << "element " << i << " of the box";
  for (size_t i = ref.size(); i < dst.size(); ++i) ASSERT_TRUE(std::isnan(dst[i])) << "wrote past the box";
}

Box make_box(const Dims& lo, const Dims& hi) {
  Box b;
  b.lo = lo;
  b.hi = hi;
  return b;
}

TEST(BorderSource, TorchsTables) {
  // torch: F.pad(torch.arange(4.)[None, None], (3, 3), mode) -> the values at each padded position.
  const std::vector<int64_t> reflect{3, 2, 1, 0, 1, 2, 3, 2, 1, 0}, replicate{0, 0, 0, 0, 1, 2, 3, 3, 3, 3},
      circular{1, 2, 3, 0, 1, 2, 3, 0, 1, 2};
  for (int64_t i = -3; i < 7; ++i) {
    const size_t at = static_cast<size_t>(i + 3);
    EXPECT_EQ(ooc::border_source(i, 4, PaddingMode::reflect), reflect[at]) << i;
    EXPECT_EQ(ooc::border_source(i, 4, PaddingMode::replicate), replicate[at]) << i;
    EXPECT_EQ(ooc::border_source(i, 4, PaddingMode::circular), circular[at]) << i;
    EXPECT_EQ(ooc::border_source(i, 4, PaddingMode::zeros), i >= 0 && i < 4 ? i : -1) << i;
  }
  EXPECT_EQ(ooc::border_source(-4, 4, PaddingMode::circular), 0);  // circular pads up to the size
  EXPECT_EQ(ooc::border_source(7, 4, PaddingMode::circular), 3);
  EXPECT_EQ(ooc::border_source(-100, 4, PaddingMode::replicate), 0);
  EXPECT_EQ(ooc::border_source(100, 4, PaddingMode::replicate), 3);
  EXPECT_EQ(ooc::border_source(0, 1, PaddingMode::reflect), 0);
}

TEST(BorderSource, MoreThanOnePeriodIsALogicError) {
  // set_padding_mode refuses such paddings; a chunk that still asked would be a planner bug.
  EXPECT_THROW(ooc::border_source(-4, 4, PaddingMode::reflect), std::logic_error);
  EXPECT_THROW(ooc::border_source(7, 4, PaddingMode::reflect), std::logic_error);
  EXPECT_THROW(ooc::border_source(-1, 1, PaddingMode::reflect), std::logic_error);
  EXPECT_THROW(ooc::border_source(-5, 4, PaddingMode::circular), std::logic_error);
  EXPECT_THROW(ooc::border_source(8, 4, PaddingMode::circular), std::logic_error);
}

TEST(BorderGather, ReferenceListsAreNumpysPads) {
  // np.pad(np.arange(5), (4, 3), mode) for 'reflect', 'edge', 'wrap'.
  EXPECT_EQ(padded_indices(5, 4, 3, PaddingMode::reflect), (std::vector<int64_t>{4, 3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1}));
  EXPECT_EQ(padded_indices(5, 4, 3, PaddingMode::replicate),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 2, 3, 4, 4, 4, 4}));
  EXPECT_EQ(padded_indices(5, 4, 3, PaddingMode::circular), (std::vector<int64_t>{1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2}));
}

// Random boxes of every rank whose every dimension may leave the tensor at either end by up to
// max_pad, some with whole trailing dims (merged rows), for each mode.
TEST(BorderGather, RandomBoxesEveryRankAndMode) {
  ooc::ThreadPool pool(3);
  std::mt19937 rng(11);
  for (PaddingMode mode : kModes) {
    for (int rank : {1, 2, 3, 4, 5}) {
      Dims shape{1, 1, 1, 1, 1};
      for (int i = 0; i < rank; ++i) shape[i] = std::uniform_int_distribution<int64_t>(1, rank <= 2 ? 13 : 6)(rng);
      const auto data = iota_tensor(elements(shape, rank));
      TensorView t = TensorView::contiguous(data.data(), shape, rank, 4);
      t.border = mode;
      for (int trial = 0; trial < 200; ++trial) {
        Box b;
        for (int i = 0; i < rank; ++i) {
          const int64_t pad = max_pad(mode, shape[i]);
          b.lo[i] = std::uniform_int_distribution<int64_t>(-pad, shape[i] + pad - 1)(rng);
          b.hi[i] = std::uniform_int_distribution<int64_t>(b.lo[i] + 1, shape[i] + pad)(rng);
        }
        if (trial % 3 == 0)
          for (int i = rank / 2; i < rank; ++i) b.lo[i] = 0, b.hi[i] = shape[i];
        expect_gather_matches(t, b, pool);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(BorderGather, WholeHaloAroundATensorAndParallelRows) {
  // A halo around every spatial dim of an [N, C, D, H, W] tensor, as a convolution's chunk of a
  // whole padded dimension reads it; large enough that the rows spread over the workers, and the
  // result must equal one worker's.
  const Dims shape{2, 3, 9, 40, 700};
  const auto data = iota_tensor(elements(shape, 5));
  ooc::ThreadPool serial(1), parallel(4);
  for (PaddingMode mode : kModes) {
    TensorView t = TensorView::contiguous(data.data(), shape, 5, 4);
    t.border = mode;
    const Box b = make_box({0, 0, -2, -3, -5}, {2, 3, 11, 43, 705});
    ASSERT_GE(b.elements(5) * 4, int64_t{1} << 20) << "box too small for the parallel path";
    std::vector<float> a(static_cast<size_t>(b.elements(5)), -1.0f), c(a.size(), -2.0f);
    ooc::gather_box(t, b, a.data(), serial);
    ooc::gather_box(t, b, c.data(), parallel);
    ASSERT_EQ(a, reference_gather(t, b)) << ooc::padding_mode_name(mode);
    ASSERT_EQ(a, c) << ooc::padding_mode_name(mode);
    // A long single row cut into pieces across the workers, halo at both ends.
    const Dims row_shape{1, 1, 1, 1, 1 << 19};
    const auto row = iota_tensor(elements(row_shape, 5));
    TensorView r = TensorView::contiguous(row.data(), row_shape, 5, 4);
    r.border = mode;
    expect_gather_matches(r, make_box({0, 0, 0, 0, -3}, {1, 1, 1, 1, (1 << 19) + 4}), parallel);
  }
}

TEST(BorderGather, HalfPrecisionElementsMoveAsBytes) {
  // Two-byte elements (float16, bfloat16): the gather copies bytes; check against the float view
  // of the same indices.
  const Dims shape{1, 2, 5, 4, 1};
  std::vector<uint16_t> data(static_cast<size_t>(elements(shape, 4)));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint16_t>(i + 1);
  const auto floats = iota_tensor(elements(shape, 4));
  ooc::ThreadPool pool(2);
  for (PaddingMode mode : kModes) {
    TensorView t = TensorView::contiguous(data.data(), shape, 4, 2);
    TensorView f = TensorView::contiguous(floats.data(), shape, 4, 4);
    t.border = f.border = mode;
    const Box b = make_box({0, 0, -2, -3, 0}, {1, 2, 7, 7, 1});
    std::vector<uint16_t> got(static_cast<size_t>(b.elements(4)));
    ooc::gather_box(t, b, got.data(), pool);
    const std::vector<float> want = reference_gather(f, b);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(static_cast<float>(got[i]), want[i]) << i;
  }
}

TEST(BorderGather, DmaRefusesABorderHaloAndWindowsReadZeros) {
  const Dims shape{1, 1, 4, 5, 1};
  const auto data = iota_tensor(elements(shape, 4));
  TensorView t = TensorView::contiguous(data.data(), shape, 4, 4);
  t.border = PaddingMode::reflect;
  std::vector<float> dense(64);
  EXPECT_THROW(ooc::strided_box_copies(t, make_box({0, 0, -1, 0, 0}, {1, 1, 4, 5, 0}), reinterpret_cast<char*>(dense.data()), true),
               std::logic_error);
  // Inside the tensor DMA is exact whatever the border: the mode only defines what lies outside.
  EXPECT_EQ(ooc::strided_box_copies(t, make_box({0, 0, 1, 1, 0}, {1, 1, 3, 4, 0}), reinterpret_cast<char*>(dense.data()), true)
                .covers_all,
            true);
  const TensorView w = t.window({0, 0, 1, 1, 0}, {1, 1, 3, 4, 0});
  EXPECT_EQ(w.border, PaddingMode::zeros);
  std::vector<float> out(4 * 5, std::nanf(""));
  ooc::ThreadPool pool(1);
  ooc::gather_box(w, make_box({0, 0, -1, -1, 0}, {1, 1, 3, 4, 0}), out.data(), pool);
  EXPECT_EQ(out[0], 0.0f);  // outside the window: zero, not a reflection
}

}  // namespace
