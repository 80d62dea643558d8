// The depthwise convolution's filter gradient (groups == input channels, one input channel a
// group, any channel multiplier) as our own CUDA kernel computes it (backend/cuda/depthwise_kernels.cu):
// cuDNN's depthwise backward-filter kernels run several times slower than the link on the chunks
// the planner makes (bench filter-dw3d: 0.53 of the roofline), while the work is small, taps x
// positions multiply-adds per output channel, with x and dy each read once.
//
// This header holds the geometry and one thread's share of the sums, callable on the host too, so
// that a CPU test (native/tests/test_depthwise_wgrad.cpp) runs the kernels' exact indexing against
// a float64 reference; the CUDA file adds only the block reduction and the launches.
//
// dw[k, 0, t] = alpha * sum over n and output positions o of dy[n, k, o] * x[n, k / m, o * stride -
// padding + t * dilation] (+ beta * dw), m = k / c, taken as zero outside x: channels-first chunks,
// x and dy of the chunk's dtype, dw float32 (ChunkConv::out_dtype of a half call, or float32).
#pragma once

#include <cstdint>

#include "backend/backend.hpp"
#include "backend/element_access.hpp"

namespace ooc::depthwise {

// Taps one pass of the kernel accumulates per thread (in registers); wider kernels take several
// passes (blockIdx.z): 27 covers 3x3x3 in one, ConvNeXt's 7x7 takes two, 7x7x7 eleven.
constexpr int kTapsPerPass = 32;

struct Geometry {
  int64_t n = 1, c = 1, k = 1, multiplier = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, padding[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};

  OOC_HOST_DEVICE int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  OOC_HOST_DEVICE int64_t positions() const { return n * out[0] * out[1] * out[2]; }
  OOC_HOST_DEVICE int passes() const { return static_cast<int>((taps() + kTapsPerPass - 1) / kTapsPerPass); }
};

// Whether the kernel serves the chunk: a backward filter of a depthwise convolution in the
// channels-first layout (channels-last chunks stay with cuDNN, whose NHWC kernels read them
// coalesced), its dw accumulating in float32.
inline bool serves(const ChunkConv& s) {
  return s.groups == s.c && s.k % s.c == 0 && s.layout == Layout::channels_first && s.out_dtype == DType::float32;
}

inline Geometry geometry_of(const ChunkConv& s) {
  Geometry g;
  g.n = s.n;
  g.c = s.c;
  g.k = s.k;
  g.multiplier = s.k / s.c;
  for (int d = 0; d < 3; ++d) {
    g.in[d] = s.in[d];
    g.out[d] = s.out[d];
    g.kernel[d] = s.kernel[d];
    g.stride[d] = s.stride[d];
    g.padding[d] = s.padding[d];
    g.dilation[d] = s.dilation[d];
  }
  return g;
}

// The taps one pass sums: their offsets t_d * dilation_d in x, per spatial dimension. The kernel
// builds it once a block (in shared memory), so that no position decomposes a tap index again.
struct TapTable {
  int64_t offset[3][kTapsPerPass];
  int count;
};

OOC_HOST_DEVICE inline void tap_table(const Geometry& g, int pass, TapTable& table) {
  const int64_t tap0 = static_cast<int64_t>(pass) * kTapsPerPass;
  table.count = static_cast<int>(g.taps() - tap0 < kTapsPerPass ? g.taps() - tap0 : kTapsPerPass);
  for (int j = 0; j < kTapsPerPass; ++j) {
    const int64_t t = j < table.count ? tap0 + j : tap0;  // unused entries: any valid tap
    const int64_t t0 = t / (g.kernel[1] * g.kernel[2]), t12 = t - t0 * g.kernel[1] * g.kernel[2];
    const int64_t t1 = t12 / g.kernel[2], t2 = t12 - t1 * g.kernel[2];
    table.offset[0][j] = t0 * g.dilation[0];
    table.offset[1][j] = t1 * g.dilation[1];
    table.offset[2][j] = t2 * g.dilation[2];
  }
}

// One thread's sums for output channel `k_index` over the positions first, first + step, ... below
// end (positions enumerate n, out[0], out[1], out[2], the last fastest, so that neighbouring
// threads read neighbouring dy and, for stride 1, x): acc[j] += dy * x at the pass's tap j.
template <typename T>
OOC_HOST_DEVICE void accumulate(const Geometry& g, const TapTable& taps, const T* x, const T* dy, int64_t k_index,
                                int64_t first, int64_t end, int64_t step, float (&acc)[kTapsPerPass]) {
  const int64_t channel = k_index / g.multiplier;
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2], in_plane = g.in[0] * g.in[1] * g.in[2];
  for (int64_t p = first; p < end; p += step) {
    const int64_t sample = p / out_plane, within = p - sample * out_plane;
    const int64_t o0 = within / (g.out[1] * g.out[2]), rest = within - o0 * g.out[1] * g.out[2];
    const int64_t o1 = rest / g.out[2], o2 = rest - o1 * g.out[2];
    const float d = element_access::load(dy[(sample * g.k + k_index) * out_plane + within]);
    const T* x_plane = x + (sample * g.c + channel) * in_plane;
    const int64_t base0 = o0 * g.stride[0] - g.padding[0], base1 = o1 * g.stride[1] - g.padding[1],
                  base2 = o2 * g.stride[2] - g.padding[2];
    for (int j = 0; j < kTapsPerPass; ++j) {
      if (j >= taps.count) break;
      const int64_t i0 = base0 + taps.offset[0][j], i1 = base1 + taps.offset[1][j], i2 = base2 + taps.offset[2][j];
      if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
      acc[j] += d * element_access::load(x_plane[(i0 * g.in[1] + i1) * g.in[2] + i2]);
    }
  }
}

// The positions part `part` of `parts` covers: [begin, end), parts of near-equal size.
OOC_HOST_DEVICE inline void part_range(int64_t positions, int64_t part, int64_t parts, int64_t& begin, int64_t& end) {
  begin = positions * part / parts;
  end = positions * (part + 1) / parts;
}

}  // namespace ooc::depthwise
