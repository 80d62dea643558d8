// Our depthwise filter gradient's indexing (backend/depthwise_wgrad.hpp) on the CPU: the CUDA
// kernel's grid emulated here, each (output channel, part, pass) block's threads calling the same
// depthwise::accumulate the kernel calls and their sums added in float64 as the kernel adds them,
// against a float64 reference written from the definition, for 1-D, 2-D and 3-D chunks with
// strides, dilations, padding, channel multipliers, kernels wider than one pass, and half inputs;
// the result must not depend on how many parts or threads share the positions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/depthwise_wgrad.hpp"

namespace {

using ooc::ChunkConv;
using ooc::DType;
using ooc::Layout;
namespace depthwise = ooc::depthwise;

struct Case {
  const char* name;
  int spatial_dims;
  int64_t n, c, multiplier;
  ooc::Dims3 in, kernel, stride, padding, dilation;
};

ChunkConv chunk_of(const Case& k) {
  ChunkConv s;
  s.spatial_dims = k.spatial_dims;
  s.n = k.n;
  s.c = s.groups = k.c;
  s.k = k.c * k.multiplier;
  s.in = k.in;
  s.kernel = k.kernel;
  s.stride = k.stride;
  s.padding = k.padding;
  s.dilation = k.dilation;
  for (int d = 0; d < 3; ++d)
    s.out[d] = (k.in[d] + 2 * k.padding[d] - k.dilation[d] * (k.kernel[d] - 1) - 1) / k.stride[d] + 1;
  s.out_dtype = DType::float32;
  return s;
}

// dw[kk][t] from the definition, in float64.
std::vector<double> reference(const ChunkConv& s, const std::vector<double>& x, const std::vector<double>& dy) {
  const int64_t m = s.k / s.c, taps = s.kernel[0] * s.kernel[1] * s.kernel[2];
  std::vector<double> dw(static_cast<size_t>(s.k * taps), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t kk = 0; kk < s.k; ++kk)
      for (int64_t o0 = 0; o0 < s.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < s.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < s.out[2]; ++o2) {
            const double d = dy[static_cast<size_t>((((n * s.k + kk) * s.out[0] + o0) * s.out[1] + o1) * s.out[2] + o2)];
            for (int64_t t0 = 0; t0 < s.kernel[0]; ++t0)
              for (int64_t t1 = 0; t1 < s.kernel[1]; ++t1)
                for (int64_t t2 = 0; t2 < s.kernel[2]; ++t2) {
                  const int64_t i0 = o0 * s.stride[0] - s.padding[0] + t0 * s.dilation[0];
                  const int64_t i1 = o1 * s.stride[1] - s.padding[1] + t1 * s.dilation[1];
                  const int64_t i2 = o2 * s.stride[2] - s.padding[2] + t2 * s.dilation[2];
                  if (i0 < 0 || i0 >= s.in[0] || i1 < 0 || i1 >= s.in[1] || i2 < 0 || i2 >= s.in[2]) continue;
                  const size_t xi = static_cast<size_t>((((n * s.c + kk / m) * s.in[0] + i0) * s.in[1] + i1) * s.in[2] + i2);
                  dw[static_cast<size_t>(kk * taps + (t0 * s.kernel[1] + t1) * s.kernel[2] + t2)] += d * x[xi];
                }
          }
  return dw;
}

// The kernel's grid on the host: block (kk, part, pass), `threads` threads each summing its
// positions into float registers, the block's and the parts' sums in float64.
template <typename T>
std::vector<double> emulated(const ChunkConv& s, const std::vector<T>& x, const std::vector<T>& dy, int64_t parts,
                             int threads) {
  const depthwise::Geometry g = depthwise::geometry_of(s);
  const int64_t taps = g.taps();
  std::vector<double> dw(static_cast<size_t>(g.k * taps), 0.0);
  for (int64_t kk = 0; kk < g.k; ++kk)
    for (int pass = 0; pass < g.passes(); ++pass)
      for (int64_t part = 0; part < parts; ++part) {
        int64_t begin = 0, end = 0;
        depthwise::part_range(g.positions(), part, parts, begin, end);
        depthwise::TapTable table;
        depthwise::tap_table(g, pass, table);
        for (int thread = 0; thread < threads; ++thread) {
          float acc[depthwise::kTapsPerPass] = {};
          depthwise::accumulate(g, table, x.data(), dy.data(), kk, begin + thread, end, threads, acc);
          for (int j = 0; j < depthwise::kTapsPerPass; ++j) {
            const int64_t t = static_cast<int64_t>(pass) * depthwise::kTapsPerPass + j;
            if (t < taps) dw[static_cast<size_t>(kk * taps + t)] += acc[j];
            else EXPECT_EQ(acc[j], 0.0f) << "a register past the last tap was written";
          }
        }
      }
  return dw;
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

template <typename T>
void check(const Case& k, double tolerance) {
  const ChunkConv s = chunk_of(k);
  ASSERT_TRUE(depthwise::serves(s)) << k.name;
  std::mt19937_64 rng(20261206);
  std::normal_distribution<float> normal;
  const size_t x_count = static_cast<size_t>(s.n * s.c * s.in[0] * s.in[1] * s.in[2]);
  const size_t dy_count = static_cast<size_t>(s.n * s.k * s.out[0] * s.out[1] * s.out[2]);
  std::vector<T> x(x_count), dy(dy_count);
  std::vector<double> xd(x_count), dyd(dy_count);
  for (size_t i = 0; i < x_count; ++i) {
    x[i] = ooc::element_access::store<T>(normal(rng));
    xd[i] = ooc::element_access::load(x[i]);  // the reference sees the rounded values
  }
  for (size_t i = 0; i < dy_count; ++i) {
    dy[i] = ooc::element_access::store<T>(normal(rng));
    dyd[i] = ooc::element_access::load(dy[i]);
  }
  const std::vector<double> want = reference(s, xd, dyd);
  for (auto [parts, threads] : {std::pair<int64_t, int>{1, 1}, {3, 7}, {7, 256}, {64, 32}})
    EXPECT_LT(relative_error(emulated(s, x, dy, parts, threads), want), tolerance)
        << k.name << " parts " << parts << " threads " << threads;
}

const Case kCases[] = {
    {"1d_stride2_pad", 1, 3, 4, 1, {23, 1, 1}, {5, 1, 1}, {2, 1, 1}, {2, 0, 0}, {1, 1, 1}},
    {"2d_multiplier3_dilated", 2, 2, 5, 3, {11, 9, 1}, {3, 3, 1}, {1, 1, 1}, {2, 1, 0}, {2, 1, 1}},
    {"2d_7x7_two_passes", 2, 2, 3, 1, {15, 13, 1}, {7, 7, 1}, {1, 1, 1}, {3, 3, 0}, {1, 1, 1}},
    {"3d_3x3x3_strided", 3, 2, 4, 2, {7, 8, 9}, {3, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 1, 1}},
    {"3d_no_padding_uneven", 3, 1, 2, 1, {6, 5, 7}, {3, 2, 3}, {2, 1, 2}, {0, 0, 0}, {1, 2, 1}},
};

TEST(DepthwiseWgrad, EmulatedGridMatchesTheDefinitionInFloat32) {
  for (const Case& k : kCases) check<float>(k, 1e-6);
}

TEST(DepthwiseWgrad, HalfInputsSumInFloat32) {
  for (const Case& k : kCases) {
    check<__half>(k, 1e-6);  // the reference takes the same rounded inputs: only the sums differ
    check<__nv_bfloat16>(k, 1e-6);
  }
}

TEST(DepthwiseWgrad, ServesChannelsFirstDepthwiseChunksOnly) {
  ChunkConv s = chunk_of(kCases[3]);
  EXPECT_TRUE(depthwise::serves(s));
  ChunkConv grouped = s;
  grouped.c = 8;  // two input channels a group
  EXPECT_FALSE(depthwise::serves(grouped));
  ChunkConv last = s;
  last.layout = Layout::channels_last;
  EXPECT_FALSE(depthwise::serves(last));
  ChunkConv half_output = s;
  half_output.out_dtype = DType::float16;
  EXPECT_FALSE(depthwise::serves(half_output));
}

}  // namespace
