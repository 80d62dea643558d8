#include "backend/cuda/layer_kernels.hpp"

#include <algorithm>

#include "backend/cuda/cuda_check.hpp"

namespace ooc::cuda_kernels {
namespace {

constexpr int kReduceThreads = 512;

// Sums two doubles per thread over the block; thread 0 gets the totals.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kReduceThreads], sb[kReduceThreads];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) {
      sa[threadIdx.x] += sa[threadIdx.x + step];
      sb[threadIdx.x] += sb[threadIdx.x + step];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
}

// One block per channel; float64 sums shifted by the channel's first element (as host_layers.cpp).
__global__ void moments_kernel(int64_t n, int64_t c, int64_t space, const float* x, float* stats) {
  const int64_t ch = blockIdx.x;
  const double shift = x[ch * space];
  double sum = 0, sq = 0;
  const int64_t count = n * space;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t row = i / space, col = i - row * space;
    const double d = static_cast<double>(x[(row * c + ch) * space + col]) - shift;
    sum += d;
    sq += d * d;
  }
  block_sum2(sum, sq);
  if (threadIdx.x == 0) {
    const double cnt = static_cast<double>(count);
    stats[2 * ch] = static_cast<float>(shift + sum / cnt);
    stats[2 * ch + 1] = static_cast<float>(sq - sum * sum / cnt);
  }
}

__global__ void grad_sums_kernel(int64_t n, int64_t c, int64_t space, const float* x, const float* dy,
                                 const float* mean_invstd, float* sums) {
  const int64_t ch = blockIdx.x;
  const double mean = mean_invstd[2 * ch], invstd = mean_invstd[2 * ch + 1];
  double sdy = 0, sdyx = 0;
  const int64_t count = n * space;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t row = i / space, col = i - row * space, o = (row * c + ch) * space + col;
    const double g = dy[o];
    sdy += g;
    sdyx += g * ((static_cast<double>(x[o]) - mean) * invstd);
  }
  block_sum2(sdy, sdyx);
  if (threadIdx.x == 0) {
    sums[2 * ch] = static_cast<float>(sdy);
    sums[2 * ch + 1] = static_cast<float>(sdyx);
  }
}

__global__ void affine_kernel(int64_t total, int64_t c, int64_t space, const float* x, const float* dy,
                              const float* coef, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / space) % c;
    if (dy)
      y[i] = x[i] * coef[3 * ch] + dy[i] * coef[3 * ch + 1] + coef[3 * ch + 2];
    else
      y[i] = x[i] * coef[2 * ch] + coef[2 * ch + 1];
  }
}

__global__ void row_bias_kernel(int64_t total, int64_t cols, const float* bias, float* c) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    c[i] += bias[i % cols];
}

unsigned grid_for(int64_t total, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((total + threads - 1) / threads, 65535)));
}

}  // namespace

void channel_moments(const ChunkChannels& s, const float* x, float* stats, cudaStream_t stream) {
  moments_kernel<<<static_cast<unsigned>(s.c), kReduceThreads, 0, stream>>>(s.n, s.c, s.space, x, stats);
  OOC_CUDA_CHECK(cudaGetLastError());
}

void channel_grad_sums(const ChunkChannels& s, const float* x, const float* dy, const float* mean_invstd, float* sums,
                       cudaStream_t stream) {
  grad_sums_kernel<<<static_cast<unsigned>(s.c), kReduceThreads, 0, stream>>>(s.n, s.c, s.space, x, dy, mean_invstd,
                                                                              sums);
  OOC_CUDA_CHECK(cudaGetLastError());
}

void channel_affine(const ChunkChannels& s, const float* x, const float* dy, const float* coef, float* y,
                    cudaStream_t stream) {
  const int64_t total = s.n * s.c * s.space;
  affine_kernel<<<grid_for(total, 256), 256, 0, stream>>>(total, s.c, s.space, x, dy, coef, y);
  OOC_CUDA_CHECK(cudaGetLastError());
}

void add_row_bias(int64_t rows, int64_t cols, const float* bias, float* c, cudaStream_t stream) {
  const int64_t total = rows * cols;
  row_bias_kernel<<<grid_for(total, 256), 256, 0, stream>>>(total, cols, bias, c);
  OOC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ooc::cuda_kernels
