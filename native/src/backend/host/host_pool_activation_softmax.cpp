#include "backend/host/host_pool_activation_softmax.hpp"

#include "backend/activation_formulas.hpp"
#include "backend/host/host_elements.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace ooc {
namespace {

int64_t spatial_elements(const ChunkConv& s) { return s.in[0] * s.in[1] * s.in[2]; }
int64_t elements(const ChunkConv& s) { return s.n * s.c * spatial_elements(s); }

// f(i) for i in [0, count), on the worker pool.
template <typename F>
void each(ThreadPool& pool, int64_t count, F f) {
  pool.parallel_for(count, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

using host_elements::load;
using host_elements::store;

// cuDNN's blend of a result r into an output: alpha * r + beta * out; beta == 0 never uses out
// (which may be NaN, or garbage, then).
float blend(double r, double alpha, double beta, double out) {
  return static_cast<float>(beta == 0.0 ? alpha * r : alpha * r + beta * out);
}

// Calls f(base, count, stride) for each group softmax reduces over: channel mode: the c values at
// one (n, position), `stride` apart; instance: the c*space values of one n, contiguous.
template <typename F>
void for_each_group(ThreadPool& pool, const ChunkConv& s, SoftmaxMode mode, F f) {
  const int64_t sp = spatial_elements(s);
  if (mode == SoftmaxMode::instance) {
    each(pool, s.n, [&](int64_t n) { f(n * s.c * sp, s.c * sp, int64_t{1}); });
    return;
  }
  each(pool, s.n * sp, [&](int64_t g) {
    const int64_t n = g / sp, pos = g % sp;
    f(n * s.c * sp + pos, s.c, sp);
  });
}

}  // namespace

void host_activation_forward(const ChunkConv& shape, ActivationMode mode, double coef, const void* x_data,
                             void* y_data, double alpha, double beta, ThreadPool& pool) {
  host_elements::with_type(shape.dtype, [&](auto element) {
    using T = decltype(element);
    const T* x = static_cast<const T*>(x_data);
    T* y = static_cast<T*>(y_data);
    each(pool, elements(shape), [&](int64_t i) {
      y[i] = store<T>(blend(activation_value<double>(mode, coef, load(x[i])), alpha, beta, load(y[i])));
    });
  });
}

void host_activation_backward(const ChunkConv& shape, ActivationMode mode, double coef, const void* y_data,
                              const void* dy_data, const void* x_data, void* dx_data, double alpha, double beta,
                              ThreadPool& pool) {
  host_elements::with_type(shape.dtype, [&](auto element) {
    using T = decltype(element);
    const T *y = static_cast<const T*>(y_data), *dy = static_cast<const T*>(dy_data), *x = static_cast<const T*>(x_data);
    T* dx = static_cast<T*>(dx_data);
    each(pool, elements(shape), [&](int64_t i) {
      dx[i] = store<T>(blend(activation_gradient<double>(mode, coef, load(y[i]), load(dy[i]), load(x[i])), alpha, beta,
                             load(dx[i])));
    });
  });
}

void host_softmax_forward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* x_data, void* y_data,
                          double alpha, double beta, ThreadPool& pool) {
  host_elements::with_type(shape.dtype, [&](auto element) {
    using T = decltype(element);
    const T* x = static_cast<const T*>(x_data);
    T* y = static_cast<T*>(y_data);
    for_each_group(pool, shape, mode, [&](int64_t base, int64_t count, int64_t stride) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < count; ++j) m = std::max(m, static_cast<double>(load(x[base + j * stride])));
      for (int64_t j = 0; j < count; ++j) sum += std::exp(load(x[base + j * stride]) - m);
      for (int64_t j = 0; j < count; ++j) {
        const double v = load(x[base + j * stride]) - m;
        T& out = y[base + j * stride];
        out = store<T>(blend(log ? v - std::log(sum) : std::exp(v) / sum, alpha, beta, load(out)));
      }
    });
  });
}

void host_softmax_backward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* y_data,
                           const void* dy_data, void* dx_data, double alpha, double beta, ThreadPool& pool) {
  host_elements::with_type(shape.dtype, [&](auto element) {
    using T = decltype(element);
    const T *y = static_cast<const T*>(y_data), *dy = static_cast<const T*>(dy_data);
    T* dx = static_cast<T*>(dx_data);
    for_each_group(pool, shape, mode, [&](int64_t base, int64_t count, int64_t stride) {
      double dot = 0;  // softmax: sum dy*y; log-softmax: sum dy
      for (int64_t j = 0; j < count; ++j) {
        const int64_t i = base + j * stride;
        const double g = load(dy[i]);
        dot += log ? g : g * load(y[i]);
      }
      for (int64_t j = 0; j < count; ++j) {
        const int64_t i = base + j * stride;
        const double yi = load(y[i]), g = load(dy[i]);
        dx[i] = store<T>(blend(log ? g - std::exp(yi) * dot : yi * (g - dot), alpha, beta, load(dx[i])));
      }
    });
  });
}

void host_add_tensor(const ChunkConv& a_shape, const ChunkConv& out_shape, double alpha, const void* a_data,
                     double beta, const void* b_data, void* out_data, ThreadPool& pool) {
  const int64_t ext[5] = {out_shape.n, out_shape.c, out_shape.in[0], out_shape.in[1], out_shape.in[2]};
  const int64_t aext[5] = {a_shape.n, a_shape.c, a_shape.in[0], a_shape.in[1], a_shape.in[2]};
  int64_t astride[5];
  astride[4] = 1;
  for (int d = 3; d >= 0; --d) astride[d] = astride[d + 1] * aext[d + 1];
  host_elements::with_type(out_shape.dtype, [&](auto element) {
    using T = decltype(element);
    const T *a = static_cast<const T*>(a_data), *b = static_cast<const T*>(b_data);
    T* out = static_cast<T*>(out_data);
    each(pool, elements(out_shape), [&](int64_t i) {
      int64_t rest = i, ai = 0;
      for (int d = 4; d >= 0; --d) {
        const int64_t idx = rest % ext[d];
        rest /= ext[d];
        if (aext[d] != 1) ai += idx * astride[d];
      }
      const double prev = beta == 0.0 ? 0.0 : beta * static_cast<double>(load(b ? b[i] : out[i]));
      out[i] = store<T>(static_cast<float>(alpha * load(a[ai]) + prev));
    });
  });
}

void host_pool_forward(const ChunkConv& s, PoolMode mode, const void* x_data, void* y_data, double alpha, double beta,
                       ThreadPool& pool) {
  const int64_t in0 = s.in[0], in1 = s.in[1], in2 = s.in[2], o0 = s.out[0], o1 = s.out[1], o2 = s.out[2];
  const double window = static_cast<double>(s.kernel[0] * s.kernel[1] * s.kernel[2]);
  host_elements::with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    const T* x = static_cast<const T*>(x_data);
    T* y = static_cast<T*>(y_data);
    each(pool, s.n * s.c * o0 * o1 * o2, [&](int64_t i) {
      int64_t r = i;
      const int64_t c2 = r % o2; r /= o2;
      const int64_t c1 = r % o1; r /= o1;
      const int64_t c0 = r % o0; r /= o0;
      const T* plane = x + r * in0 * in1 * in2;  // r: n * c + channel
      // The window clipped to the tensor: padding is -inf for max, zeros (counted or not) for avg.
      const int64_t b0 = c0 * s.stride[0] - s.padding[0], b1 = c1 * s.stride[1] - s.padding[1],
                    b2 = c2 * s.stride[2] - s.padding[2];
      double acc = mode == PoolMode::max ? -INFINITY : 0.0;
      int64_t count = 0;
      for (int64_t a = std::max<int64_t>(b0, 0); a < std::min(b0 + s.kernel[0], in0); ++a)
        for (int64_t b = std::max<int64_t>(b1, 0); b < std::min(b1 + s.kernel[1], in1); ++b)
          for (int64_t d = std::max<int64_t>(b2, 0); d < std::min(b2 + s.kernel[2], in2); ++d) {
            const double v = load(plane[(a * in1 + b) * in2 + d]);
            acc = mode == PoolMode::max ? (std::isnan(v) || v > acc ? v : acc) : acc + v;
            ++count;
          }
      if (mode == PoolMode::avg) acc /= window;
      if (mode == PoolMode::avg_exclude_pad) acc /= static_cast<double>(count);
      y[i] = store<T>(blend(acc, alpha, beta, load(y[i])));
    });
  });
}

void host_pool_backward(const ChunkConv& s, PoolMode mode, const void*, const void* dy_data, const void* x_data,
                        void* dx_data, double alpha, double beta, ThreadPool& pool) {
  const int64_t in0 = s.in[0], in1 = s.in[1], in2 = s.in[2], o0 = s.out[0], o1 = s.out[1], o2 = s.out[2];
  const double window = static_cast<double>(s.kernel[0] * s.kernel[1] * s.kernel[2]);
  host_elements::with_type(s.dtype, [&](auto element) {
    using T = decltype(element);
    // One task per (n, c) plane: windows overlap, so a plane's dx is accumulated by one thread.
    each(pool, s.n * s.c, [&](int64_t plane) {
      const T* xp = static_cast<const T*>(x_data) + plane * in0 * in1 * in2;
      T* dxp = static_cast<T*>(dx_data) + plane * in0 * in1 * in2;
      const T* dyp = static_cast<const T*>(dy_data) + plane * o0 * o1 * o2;
      std::vector<double> acc(static_cast<size_t>(in0 * in1 * in2), 0.0);
      for (int64_t c0 = 0; c0 < o0; ++c0)
        for (int64_t c1 = 0; c1 < o1; ++c1)
          for (int64_t c2 = 0; c2 < o2; ++c2) {
            const double g = load(dyp[(c0 * o1 + c1) * o2 + c2]);
            const int64_t b0 = c0 * s.stride[0] - s.padding[0], b1 = c1 * s.stride[1] - s.padding[1],
                          b2 = c2 * s.stride[2] - s.padding[2];
            const int64_t e0 = std::min(b0 + s.kernel[0], in0), e1 = std::min(b1 + s.kernel[1], in1),
                          e2 = std::min(b2 + s.kernel[2], in2);
            int64_t count = 0, best = -1;
            double best_v = -INFINITY;
            for (int64_t a = std::max<int64_t>(b0, 0); a < e0; ++a)
              for (int64_t b = std::max<int64_t>(b1, 0); b < e1; ++b)
                for (int64_t d = std::max<int64_t>(b2, 0); d < e2; ++d) {
                  const int64_t i = (a * in1 + b) * in2 + d;
                  const double v = load(xp[i]);
                  if (best < 0 || v > best_v) best = i, best_v = v;
                  ++count;
                }
            for (int64_t a = std::max<int64_t>(b0, 0); a < e0 && mode != PoolMode::max; ++a)
              for (int64_t b = std::max<int64_t>(b1, 0); b < e1; ++b)
                for (int64_t d = std::max<int64_t>(b2, 0); d < e2; ++d)
                  acc[static_cast<size_t>((a * in1 + b) * in2 + d)] +=
                      g / (mode == PoolMode::avg ? window : static_cast<double>(count));
            if (mode == PoolMode::max && best >= 0) acc[static_cast<size_t>(best)] += g;
          }
      for (size_t i = 0; i < acc.size(); ++i) dxp[i] = store<T>(blend(acc[i], alpha, beta, load(dxp[i])));
    });
  });
}

}  // namespace ooc
