#include "backend/host/host_layers.hpp"

#include <vector>

#include "backend/host/host_elements.hpp"

namespace ooc {
namespace {

using host_elements::load;
using host_elements::store;

// r + beta * old, as the layers blend into their output; beta == 0 never reads old.
float blended(float r, double beta, float old) { return beta == 0.0 ? r : static_cast<float>(r + beta * old); }

}  // namespace

void host_gemm(const ChunkGemm& s, const void* a_data, const void* b_data, const void* bias_data, void* c_data,
               double alpha, double beta, ThreadPool& pool) {
  host_elements::with_type(s.dtype, [&](auto in_element) {
    host_elements::with_type(s.out_dtype, [&](auto out_element) {
      using T = decltype(in_element);
      using C = decltype(out_element);
      const T *a = static_cast<const T*>(a_data), *b = static_cast<const T*>(b_data);
      const T* bias = static_cast<const T*>(bias_data);
      C* c = static_cast<C*>(c_data);
      // Element (i, j) of op(a) and op(b) in their stored layouts.
      auto at = [&](int64_t i, int64_t kk) { return load(s.trans_a ? a[kk * s.m + i] : a[i * s.k + kk]); };
      auto bt = [&](int64_t kk, int64_t j) { return load(s.trans_b ? b[j * s.k + kk] : b[kk * s.n + j]); };
      pool.parallel_for(s.m, [&](int64_t begin, int64_t end) {
        std::vector<double> acc(static_cast<size_t>(s.n));
        for (int64_t i = begin; i < end; ++i) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t kk = 0; kk < s.k; ++kk) {
            const double av = at(i, kk);
            for (int64_t j = 0; j < s.n; ++j) acc[j] += av * bt(kk, j);
          }
          for (int64_t j = 0; j < s.n; ++j) {
            double v = alpha * acc[j] + (beta != 0.0 ? beta * static_cast<double>(load(c[i * s.n + j])) : 0.0);
            if (bias) v += load(bias[j]);
            c[i * s.n + j] = store<C>(static_cast<float>(v));
          }
        }
      });
    });
  });
}

void host_channel_moments(const ChunkChannels& s, const void* x_data, double* stats, ThreadPool& pool) {
  host_elements::with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    const T* x = static_cast<const T*>(x_data);
    pool.parallel_for(s.c, [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        // Shifted by the channel's first element: sums of squares then lose little to cancellation.
        const double shift = load(x[ch * s.space]);
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < s.n; ++n) {
          const T* row = x + (n * s.c + ch) * s.space;
          for (int64_t i = 0; i < s.space; ++i) {
            const double d = load(row[i]) - shift;
            sum += d;
            sq += d * d;
          }
        }
        const double count = static_cast<double>(s.n * s.space);
        stats[2 * ch] = shift + sum / count;
        stats[2 * ch + 1] = sq - sum * sum / count;
      }
    });
  });
}

void host_channel_grad_sums(const ChunkChannels& s, const void* x_data, const void* dy_data, const float* mean_invstd,
                            double* sums, ThreadPool& pool) {
  host_elements::with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    const T *x = static_cast<const T*>(x_data), *dy = static_cast<const T*>(dy_data);
    pool.parallel_for(s.c, [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const double mean = mean_invstd[2 * ch], invstd = mean_invstd[2 * ch + 1];
        double sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < s.n; ++n) {
          const int64_t o = (n * s.c + ch) * s.space;
          for (int64_t i = 0; i < s.space; ++i) {
            const double g = load(dy[o + i]);
            sdy += g;
            sdyx += g * ((load(x[o + i]) - mean) * invstd);
          }
        }
        sums[2 * ch] = sdy;
        sums[2 * ch + 1] = sdyx;
      }
    });
  });
}

void host_channel_affine(const ChunkChannels& s, const void* x_data, const void* dy_data, const float* coef,
                         double beta, void* y_data, ThreadPool& pool) {
  host_elements::with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    const T *x = static_cast<const T*>(x_data), *dy = static_cast<const T*>(dy_data);
    T* y = static_cast<T*>(y_data);
    pool.parallel_for(s.n * s.c, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t ch = row % s.c, o = row * s.space;
        for (int64_t i = 0; i < s.space; ++i) {
          const float r = dy ? load(x[o + i]) * coef[3 * ch] + load(dy[o + i]) * coef[3 * ch + 1] + coef[3 * ch + 2]
                             : load(x[o + i]) * coef[2 * ch] + coef[2 * ch + 1];
          y[o + i] = store<T>(blended(r, beta, beta == 0.0 ? 0.0f : load(y[o + i])));
        }
      }
    });
  });
}

}  // namespace ooc
