#include "backend/cuda/layer_kernels.hpp"

#include <cuda_bf16.h>

#include <algorithm>

#include "backend/activation_formulas.hpp"
#include "backend/element_access.hpp"
#include "backend/cuda/cuda_check.hpp"

namespace ooc::cuda_kernels {
namespace {

constexpr int kReduceThreads = 256;
// Enough blocks in all to fill an H100/H200 a few times over.
constexpr int64_t kTargetBlocks = 1024;

// The batch-norm kernels read and write x, dy and y in the chunk's dtype and compute in float
// (their sums in double).
using element_access::load;
using element_access::store;
using element_access::with_type;

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

// Per-channel reductions of a [n, c, space] tile into two float64 sums, split over a grid of
// (c, parts) blocks so that few channels still spread over the whole GPU; part sums land in
// scratch[(ch * parts + part) * 2 + {0, 1}] and a second kernel merges them per channel.
// moments: d = x - shift (the channel's first element, against cancellation), sums d and d^2;
// grad sums: dy and dy * (x - mean) * invstd; plain: x (the second sum unused: a bias gradient).
enum class Sums { moments, grad, plain };

template <Sums Kind, typename T>
__global__ void partial_sums_kernel(int64_t n, int64_t c, int64_t space, const T* x, const T* dy,
                                    const float* mean_invstd, double* scratch) {
  constexpr bool Grad = Kind == Sums::grad;
  const int64_t ch = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  const double shift = Grad ? mean_invstd[2 * ch] : Kind == Sums::moments ? load(x[ch * space]) : 0.0;
  const double invstd = Grad ? mean_invstd[2 * ch + 1] : 1.0;
  double a = 0, b = 0;
  const int64_t count = n * space, step = parts * blockDim.x;
#pragma unroll 4
  for (int64_t i = part * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count; i += step) {
    const int64_t row = i / space, o = (row * c + ch) * space + (i - row * space);
    const double d = static_cast<double>(load(x[o])) - shift;
    if (Grad) {
      const double g = load(dy[o]);
      a += g;
      b += g * d * invstd;
    } else {
      a += d;
      b += d * d;
    }
  }
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    scratch[(ch * parts + part) * 2] = a;
    scratch[(ch * parts + part) * 2 + 1] = b;
  }
}

// One thread per channel: adds the parts; moments become (mean, M2), grad sums stay sums.
template <Sums Kind, typename T>
__global__ void merge_parts_kernel(int64_t n, int64_t c, int64_t space, int64_t parts, const T* x,
                                   const double* scratch, double* out) {
  const int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  double a = 0, b = 0;
  for (int64_t p = 0; p < parts; ++p) {
    a += scratch[(ch * parts + p) * 2];
    b += scratch[(ch * parts + p) * 2 + 1];
  }
  if (Kind == Sums::grad) {
    out[2 * ch] = a;
    out[2 * ch + 1] = b;
  } else {
    const double cnt = static_cast<double>(n * space);
    out[2 * ch] = load(x[ch * space]) + a / cnt;
    out[2 * ch + 1] = b - a * a / cnt;
  }
}

template <typename T>
__global__ void affine_kernel(int64_t total, int64_t c, int64_t space, const T* x, const T* dy,
                              const float* coef, float beta, T* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / space) % c;
    const float r = dy ? load(x[i]) * coef[3 * ch] + load(dy[i]) * coef[3 * ch + 1] + coef[3 * ch + 2]
                       : load(x[i]) * coef[2 * ch] + coef[2 * ch + 1];
    y[i] = store<T>(beta == 0.0f ? r : r + beta * load(y[i]));
  }
}

__device__ float blended(float r, float alpha, float beta, const float& out) {
  return beta == 0.0f ? alpha * r : alpha * r + beta * out;
}

__global__ void activation_forward_kernel(int64_t total, ActivationMode mode, float coef, const float* x, float* y,
                                          float alpha, float beta) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = blended(activation_value(mode, coef, x[i]), alpha, beta, y[i]);
}

__global__ void activation_backward_kernel(int64_t total, ActivationMode mode, float coef, const float* y,
                                           const float* dy, const float* x, float* dx, float alpha, float beta) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = blended(activation_gradient(mode, coef, y[i], dy[i], x[i]), alpha, beta, dx[i]);
}

// The bias gradient's merge: db = alpha * (the parts' sum) + beta * db; beta == 0 never reads db.
__global__ void merge_sum_kernel(int64_t c, int64_t parts, const double* scratch, float alpha, float beta,
                                 float* db) {
  const int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  double a = 0;
  for (int64_t p = 0; p < parts; ++p) a += scratch[(ch * parts + p) * 2];
  const double r = alpha * a;
  db[ch] = static_cast<float>(beta == 0.0f ? r : r + static_cast<double>(beta) * db[ch]);
}

template <typename B, typename C>
__global__ void row_bias_kernel(int64_t total, int64_t cols, const B* bias, C* c) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    c[i] = store<C>(load(c[i]) + load(bias[i % cols]));
}

template <typename In, typename Out>
__global__ void convert_kernel(int64_t total, const In* src, Out* dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = store<Out>(load(src[i]));
}

// out's five extents and a's element strides along them (0 where a broadcasts).
struct Broadcast5 {
  int64_t extent[5];
  int64_t a_stride[5];
};

__global__ void add_bf16_kernel(int64_t total, Broadcast5 g, float alpha, const __nv_bfloat16* a, float beta,
                                const __nv_bfloat16* b, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, ai = 0;
    for (int d = 4; d >= 0; --d) {
      ai += (rest % g.extent[d]) * g.a_stride[d];
      rest /= g.extent[d];
    }
    // beta == 0 never reads the output (cuDNN's rule: it may hold NaN).
    const float prev = beta == 0.0f ? 0.0f : beta * __bfloat162float(b ? b[i] : out[i]);
    out[i] = __float2bfloat16_rn(alpha * __bfloat162float(a[ai]) + prev);
  }
}

unsigned grid_for(int64_t total, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((total + threads - 1) / threads, 65535)));
}

}  // namespace

int64_t reduction_parts(const ChunkChannels& s) {
  const int64_t per_channel = s.n * s.space;
  const int64_t by_size = (per_channel + kReduceThreads * 8 - 1) / (kReduceThreads * 8);
  return std::max<int64_t>(1, std::min({by_size, kTargetBlocks / std::max<int64_t>(s.c, 1) + 1, int64_t{65535}}));
}

size_t reduction_scratch_bytes(const ChunkChannels& s) {
  return static_cast<size_t>(s.c * reduction_parts(s) * 2) * sizeof(double);
}

namespace {
// The part sums of a reduction (partial_sums_kernel's grid), left in scratch for a merge kernel.
template <Sums Kind, typename T>
void launch_partial_sums(const ChunkChannels& s, const T* x, const T* dy, const float* mean_invstd, double* scratch,
                         cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.c), static_cast<unsigned>(reduction_parts(s)));  // y: at most 65535
  partial_sums_kernel<Kind, T><<<grid, kReduceThreads, 0, stream>>>(s.n, s.c, s.space, x, dy, mean_invstd, scratch);
  OOC_CUDA_CHECK(cudaGetLastError());
}

template <Sums Kind>
void channel_sums(const ChunkChannels& s, const void* x_data, const void* dy_data, const float* mean_invstd,
                  double* out, double* scratch, cudaStream_t stream) {
  with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    const T *x = static_cast<const T*>(x_data), *dy = static_cast<const T*>(dy_data);
    launch_partial_sums<Kind>(s, x, dy, mean_invstd, scratch, stream);
    merge_parts_kernel<Kind, T><<<grid_for(s.c, 128), 128, 0, stream>>>(s.n, s.c, s.space, reduction_parts(s), x,
                                                                       scratch, out);
    OOC_CUDA_CHECK(cudaGetLastError());
  });
}
}  // namespace

void channel_moments(const ChunkChannels& s, const void* x, double* stats, double* scratch, cudaStream_t stream) {
  channel_sums<Sums::moments>(s, x, nullptr, nullptr, stats, scratch, stream);
}

void channel_grad_sums(const ChunkChannels& s, const void* x, const void* dy, const float* mean_invstd, double* sums,
                       double* scratch, cudaStream_t stream) {
  channel_sums<Sums::grad>(s, x, dy, mean_invstd, sums, scratch, stream);
}

void channel_sum(const ChunkChannels& s, const void* dy, float alpha, float beta, float* db, double* scratch,
                 cudaStream_t stream) {
  with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    launch_partial_sums<Sums::plain>(s, static_cast<const T*>(dy), static_cast<const T*>(nullptr), nullptr, scratch,
                                     stream);
  });
  merge_sum_kernel<<<grid_for(s.c, 128), 128, 0, stream>>>(s.c, reduction_parts(s), scratch, alpha, beta, db);
  OOC_CUDA_CHECK(cudaGetLastError());
}

void channel_affine(const ChunkChannels& s, const void* x, const void* dy, const float* coef, float beta, void* y,
                    cudaStream_t stream) {
  const int64_t total = s.n * s.c * s.space;
  with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    affine_kernel<T><<<grid_for(total, 256), 256, 0, stream>>>(total, s.c, s.space, static_cast<const T*>(x),
                                                              static_cast<const T*>(dy), coef, beta,
                                                              static_cast<T*>(y));
    OOC_CUDA_CHECK(cudaGetLastError());
  });
}

void activation_forward(int64_t count, ActivationMode mode, float coef, const float* x, float* y, float alpha,
                        float beta, cudaStream_t stream) {
  activation_forward_kernel<<<grid_for(count, 256), 256, 0, stream>>>(count, mode, coef, x, y, alpha, beta);
  OOC_CUDA_CHECK(cudaGetLastError());
}

void activation_backward(int64_t count, ActivationMode mode, float coef, const float* y, const float* dy,
                         const float* x, float* dx, float alpha, float beta, cudaStream_t stream) {
  activation_backward_kernel<<<grid_for(count, 256), 256, 0, stream>>>(count, mode, coef, y, dy, x, dx, alpha, beta);
  OOC_CUDA_CHECK(cudaGetLastError());
}

void add_row_bias(int64_t rows, int64_t cols, DType bias_dtype, const void* bias, DType c_dtype, void* c,
                  cudaStream_t stream) {
  const int64_t total = rows * cols;
  with_type(bias_dtype, [&](auto bias_element) {
    with_type(c_dtype, [&](auto c_element) {
      using B = decltype(bias_element);
      using C = decltype(c_element);
      row_bias_kernel<B, C><<<grid_for(total, 256), 256, 0, stream>>>(total, cols, static_cast<const B*>(bias),
                                                                      static_cast<C*>(c));
      OOC_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void convert(DType from, const void* src, DType to, void* dst, int64_t count, cudaStream_t stream) {
  with_type(from, [&](auto in_element) {
    with_type(to, [&](auto out_element) {
      using In = decltype(in_element);
      using Out = decltype(out_element);
      convert_kernel<In, Out><<<grid_for(count, 256), 256, 0, stream>>>(count, static_cast<const In*>(src),
                                                                        static_cast<Out*>(dst));
      OOC_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void add_tensor_bf16(const ChunkConv& a_shape, const ChunkConv& out_shape, float alpha, const void* a, float beta,
                     const void* b, void* out, cudaStream_t stream) {
  const int64_t out_ext[5] = {out_shape.n, out_shape.c, out_shape.in[0], out_shape.in[1], out_shape.in[2]};
  const int64_t a_ext[5] = {a_shape.n, a_shape.c, a_shape.in[0], a_shape.in[1], a_shape.in[2]};
  Broadcast5 g{};
  int64_t stride = 1, total = 1;
  for (int d = 4; d >= 0; --d) {
    g.extent[d] = out_ext[d];
    g.a_stride[d] = a_ext[d] == 1 ? 0 : stride;
    stride *= a_ext[d];
    total *= out_ext[d];
  }
  add_bf16_kernel<<<grid_for(total, 256), 256, 0, stream>>>(total, g, alpha, static_cast<const __nv_bfloat16*>(a), beta,
                                                            static_cast<const __nv_bfloat16*>(b),
                                                            static_cast<__nv_bfloat16*>(out));
  OOC_CUDA_CHECK(cudaGetLastError());
}

ReductionScratch::~ReductionScratch() {
  if (data_) cuda_detail::ignore_cuda_error(cudaFree(data_));
}

double* ReductionScratch::get(size_t bytes) {
  if (bytes > bytes_) {
    // cudaFree waits for the device, so no kernel still reads the old buffer.
    if (data_) OOC_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
    OOC_CUDA_CHECK(cudaMalloc(&data_, bytes));
    bytes_ = bytes;
  }
  return static_cast<double*>(data_);
}

}  // namespace ooc::cuda_kernels
