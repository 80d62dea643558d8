#include "backend/cuda/depthwise_kernels.hpp"

#include <algorithm>

#include "backend/cuda/cuda_check.hpp"
#include "backend/depthwise_wgrad.hpp"

namespace ooc::cuda_kernels {
namespace {

using depthwise::kTapsPerPass;

constexpr int kThreads = 256;
// Blocks in all, to fill an H100/H200 a few times over (its 132 SMs take 8 such blocks each).
constexpr int64_t kTargetBlocks = 2048;

// Block (k_index, part, pass): each thread sums its positions of the part into kTapsPerPass float
// registers (depthwise::accumulate), the block adds them in float64 and writes its part sums to
// scratch[((k_index * passes + pass) * parts + part) * kTapsPerPass + j].
template <typename T>
__global__ void part_sums_kernel(depthwise::Geometry g, const T* x, const T* dy, double* scratch) {
  const int64_t k_index = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  const int pass = static_cast<int>(blockIdx.z), passes = static_cast<int>(gridDim.z);
  __shared__ depthwise::TapTable taps;
  if (threadIdx.x == 0) depthwise::tap_table(g, pass, taps);
  __syncthreads();
  float acc[kTapsPerPass] = {};
  int64_t begin = 0, end = 0;
  depthwise::part_range(g.positions(), part, parts, begin, end);
  depthwise::accumulate(g, taps, x, dy, k_index, begin + threadIdx.x, end, static_cast<int64_t>(blockDim.x), acc);

  // Warps first (shuffles, float64), then the warps' sums through shared memory.
  __shared__ double warp_sums[kThreads / 32][kTapsPerPass];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int j = 0; j < kTapsPerPass; ++j) {
    double v = acc[j];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[warp][j] = v;
  }
  __syncthreads();
  if (threadIdx.x < kTapsPerPass) {
    double total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) total += warp_sums[w][threadIdx.x];
    scratch[((k_index * passes + pass) * parts + part) * kTapsPerPass + threadIdx.x] = total;
  }
}

// One thread per (k_index, tap): the parts' sums in float64, blended into dw as cuDNN blends.
__global__ void merge_kernel(depthwise::Geometry g, int64_t parts, const double* scratch, float alpha, float beta,
                             float* dw) {
  const int64_t taps = g.taps(), i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= g.k * taps) return;
  const int64_t k_index = i / taps, t = i - k_index * taps;
  const int64_t pass = t / kTapsPerPass, j = t - pass * kTapsPerPass;
  const double* sums = scratch + ((k_index * g.passes() + pass) * parts) * kTapsPerPass + j;
  double total = 0;
  for (int64_t part = 0; part < parts; ++part) total += sums[part * kTapsPerPass];
  const float r = static_cast<float>(alpha * total);
  dw[i] = beta == 0.0f ? r : r + beta * dw[i];
}

}  // namespace

void depthwise_backward_filter(const ChunkConv& s, const void* x, const void* dy, float* dw, float alpha, float beta,
                               ReductionScratch& scratch, cudaStream_t stream) {
  const depthwise::Geometry g = depthwise::geometry_of(s);
  const int passes = g.passes();
  // Enough parts to fill the GPU when a chunk holds few channels, never a part without a position,
  // and within the grid's y limit.
  const int64_t wanted = (kTargetBlocks + g.k * passes - 1) / (g.k * passes);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>({wanted, g.positions(), 65535}));
  double* sums = scratch.get(static_cast<size_t>(g.k * passes * parts * kTapsPerPass) * sizeof(double));
  const dim3 grid(static_cast<unsigned>(g.k), static_cast<unsigned>(parts), static_cast<unsigned>(passes));
  element_access::with_type(s.dtype, [&](auto type) {
    using T = decltype(type);
    part_sums_kernel<T><<<grid, kThreads, 0, stream>>>(g, static_cast<const T*>(x), static_cast<const T*>(dy), sums);
  });
  OOC_CUDA_CHECK(cudaGetLastError());
  const int64_t outputs = g.k * g.taps();
  merge_kernel<<<static_cast<unsigned>((outputs + 255) / 256), 256, 0, stream>>>(g, parts, sums, alpha, beta, dw);
  OOC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ooc::cuda_kernels
