// Float64 references of cuDNN's layer calls and cuBLAS' SGEMM, written from cuDNN's and cuBLAS'
// definitions independently of the library: packed NCHW tensors, column-major matrices. Each
// returns the raw result r; blended() applies cuDNN's alpha * r + beta * out.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "test_util.hpp"

namespace ooc_test {

// alpha * r + beta * old, old not read when beta == 0 (it may hold NaN poison then).
inline std::vector<double> blended(const std::vector<double>& r, double alpha, double beta,
                                   const std::vector<float>& old) {
  std::vector<double> out(r.size());
  for (size_t i = 0; i < r.size(); ++i) out[i] = alpha * r[i] + (beta != 0.0 ? beta * old[i] : 0.0);
  return out;
}

// --- add tensor ---

// a broadcast to c's shape (each dim of a is c's or 1).
inline std::vector<double> broadcast(const Shape& a_shape, const std::vector<float>& a, const Shape& c_shape) {
  const size_t rank = c_shape.size();
  std::vector<double> out(static_cast<size_t>(product(c_shape)));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i), ai = 0, stride = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t idx = rest % c_shape[d];
      rest /= c_shape[d];
      if (a_shape[d] != 1) ai += idx * stride;
      stride *= a_shape[d];
    }
    out[i] = a[static_cast<size_t>(ai)];
  }
  return out;
}

// --- activation ---

inline double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// coef: clipped ReLU's ceiling, ELU's alpha, swish's beta.
inline double activation_ref(cudnnActivationMode_t mode, double coef, double x) {
  switch (mode) {
    case CUDNN_ACTIVATION_RELU: return std::max(x, 0.0);
    case CUDNN_ACTIVATION_SIGMOID: return sigmoid(x);
    case CUDNN_ACTIVATION_TANH: return std::tanh(x);
    case CUDNN_ACTIVATION_CLIPPED_RELU: return std::min(std::max(x, 0.0), coef);
    case CUDNN_ACTIVATION_ELU: return x > 0 ? x : coef * std::expm1(x);
    case CUDNN_ACTIVATION_SWISH: return x * sigmoid(coef * x);
    default: ADD_FAILURE() << "no reference for activation mode " << mode; return 0;
  }
}

// dy * f'(x), the derivative taken analytically at x.
inline double activation_grad_ref(cudnnActivationMode_t mode, double coef, double x, double dy) {
  switch (mode) {
    case CUDNN_ACTIVATION_RELU: return x > 0 ? dy : 0.0;
    case CUDNN_ACTIVATION_SIGMOID: return dy * sigmoid(x) * (1 - sigmoid(x));
    case CUDNN_ACTIVATION_TANH: return dy * (1 - std::tanh(x) * std::tanh(x));
    case CUDNN_ACTIVATION_CLIPPED_RELU: return x > 0 && x < coef ? dy : 0.0;
    case CUDNN_ACTIVATION_ELU: return x > 0 ? dy : dy * coef * std::exp(x);
    case CUDNN_ACTIVATION_SWISH: {
      const double s = sigmoid(coef * x);
      return dy * (s + coef * x * s * (1 - s));
    }
    default: ADD_FAILURE() << "no reference for activation mode " << mode; return 0;
  }
}

// --- softmax: x viewed as [n, c, space] ---

// Calls f(indices) for each group softmax normalizes over: channel mode: the c values of one
// (n, position); instance mode: the c * space values of one n.
template <typename F>
void softmax_groups(const Shape& shape, cudnnSoftmaxMode_t mode, F f) {
  const int64_t n = shape[0], c = shape[1], space = product(shape) / (n * c);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < (mode == CUDNN_SOFTMAX_MODE_CHANNEL ? space : 1); ++s) {
      std::vector<size_t> group;
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < (mode == CUDNN_SOFTMAX_MODE_CHANNEL ? 1 : space); ++p)
          group.push_back(static_cast<size_t>((i * c + ch) * space + (mode == CUDNN_SOFTMAX_MODE_CHANNEL ? s : p)));
      f(group);
    }
}

inline std::vector<double> softmax_ref(const Shape& shape, cudnnSoftmaxMode_t mode, bool log,
                                       const std::vector<float>& x) {
  std::vector<double> y(x.size());
  softmax_groups(shape, mode, [&](const std::vector<size_t>& g) {
    double m = -INFINITY, sum = 0;
    for (size_t i : g) m = std::max(m, static_cast<double>(x[i]));
    for (size_t i : g) sum += std::exp(x[i] - m);
    for (size_t i : g) y[i] = log ? x[i] - m - std::log(sum) : std::exp(x[i] - m) / sum;
  });
  return y;
}

// From y (the forward's output) and dy: softmax dx = y (dy - sum(dy y)); log-softmax dx = dy - e^y sum(dy).
inline std::vector<double> softmax_grad_ref(const Shape& shape, cudnnSoftmaxMode_t mode, bool log,
                                            const std::vector<float>& y, const std::vector<float>& dy) {
  std::vector<double> dx(y.size());
  softmax_groups(shape, mode, [&](const std::vector<size_t>& g) {
    double dot = 0;
    for (size_t i : g) dot += log ? dy[i] : static_cast<double>(dy[i]) * y[i];
    for (size_t i : g) dx[i] = log ? dy[i] - std::exp(static_cast<double>(y[i])) * dot : y[i] * (dy[i] - dot);
  });
  return dx;
}

// --- pooling: x [n, c, in...] with 2 or 3 spatial dims ---

struct PoolGeometry {
  Shape x, window, padding, stride;
};

// y's shape: cuDNN's 1 + (in + 2 pad - window) / stride per spatial dim.
inline Shape pooled(const PoolGeometry& g) {
  Shape y = g.x;
  for (size_t d = 0; d < g.window.size(); ++d)
    y[2 + d] = 1 + (g.x[2 + d] + 2 * g.padding[d] - g.window[d]) / g.stride[d];
  return y;
}

// Calls f(y index, x indices inside the window, padded window size) for every output element.
template <typename F>
void pool_windows(const PoolGeometry& g, F f) {
  const size_t sd = g.window.size();
  const Shape y = pooled(g);
  int64_t window_size = 1;
  for (int64_t w : g.window) window_size *= w;
  const int64_t planes = g.x[0] * g.x[1], x_plane = product(g.x) / planes, y_plane = product(y) / planes;
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t o = 0; o < y_plane; ++o) {
      Shape pos(sd);  // o's coordinates in y's spatial dims
      for (int64_t rest = o, d = static_cast<int64_t>(sd) - 1; d >= 0; --d) {
        pos[d] = rest % y[2 + d];
        rest /= y[2 + d];
      }
      std::vector<size_t> inside;
      for (int64_t t = 0; t < window_size; ++t) {
        int64_t xi = 0, rest = t;
        bool in = true;
        Shape tap(sd);
        for (int64_t d = static_cast<int64_t>(sd) - 1; d >= 0; --d) {
          tap[d] = rest % g.window[d];
          rest /= g.window[d];
        }
        for (size_t d = 0; d < sd; ++d) {
          const int64_t i = pos[d] * g.stride[d] - g.padding[d] + tap[d];
          in = in && i >= 0 && i < g.x[2 + d];
          xi = xi * g.x[2 + d] + i;
        }
        if (in) inside.push_back(static_cast<size_t>(plane * x_plane + xi));
      }
      f(static_cast<size_t>(plane * y_plane + o), inside, window_size);
    }
}

// Max ignores the padding (-inf); average counts it or not.
inline std::vector<double> pool_ref(const PoolGeometry& g, cudnnPoolingMode_t mode, const std::vector<float>& x) {
  std::vector<double> y(static_cast<size_t>(product(pooled(g))));
  pool_windows(g, [&](size_t yi, const std::vector<size_t>& in, int64_t window_size) {
    double acc = mode == CUDNN_POOLING_MAX ? -INFINITY : 0.0;
    for (size_t i : in) acc = mode == CUDNN_POOLING_MAX ? std::max(acc, static_cast<double>(x[i])) : acc + x[i];
    if (mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING) acc /= static_cast<double>(window_size);
    if (mode == CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING) acc /= static_cast<double>(in.size());
    y[yi] = acc;
  });
  return y;
}

// dy routed back: to each window's maximum (max), or spread over the window (average).
inline std::vector<double> pool_grad_ref(const PoolGeometry& g, cudnnPoolingMode_t mode, const std::vector<float>& x,
                                         const std::vector<float>& dy) {
  std::vector<double> dx(x.size(), 0.0);
  pool_windows(g, [&](size_t yi, const std::vector<size_t>& in, int64_t window_size) {
    if (mode == CUDNN_POOLING_MAX) {
      size_t best = in.front();
      for (size_t i : in)
        if (x[i] > x[best]) best = i;
      dx[best] += dy[yi];
      return;
    }
    const double share = mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? static_cast<double>(window_size)
                                                                            : static_cast<double>(in.size());
    for (size_t i : in) dx[i] += dy[yi] / share;
  });
  return dx;
}

// --- batch norm over x [n, c, space...], per channel c ---

struct Moments {
  std::vector<double> mean, var;  // biased variance
};

inline Moments moments_ref(const Shape& shape, const std::vector<float>& x) {
  const int64_t n = shape[0], c = shape[1], s = product(shape) / (n * c);
  Moments m{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < s; ++p) m.mean[ch] += x[static_cast<size_t>((i * c + ch) * s + p)];
  for (double& v : m.mean) v /= static_cast<double>(n * s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < s; ++p) m.var[ch] += std::pow(x[static_cast<size_t>((i * c + ch) * s + p)] - m.mean[ch], 2);
  for (double& v : m.var) v /= static_cast<double>(n * s);
  return m;
}

inline int64_t channel_of(const Shape& shape, size_t i) {
  return static_cast<int64_t>(i) / (product(shape) / (shape[0] * shape[1])) % shape[1];
}

// scale * (x - mean) / sqrt(var + eps) + bias
inline std::vector<double> normalize_ref(const Shape& shape, const std::vector<float>& x,
                                         const std::vector<double>& mean, const std::vector<double>& var, double eps,
                                         const std::vector<float>& scale, const std::vector<float>& bias) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = channel_of(shape, i);
    y[i] = scale[c] * (x[i] - mean[c]) / std::sqrt(var[c] + eps) + bias[c];
  }
  return y;
}

struct BatchNormGrads {
  std::vector<double> dx, dscale, dbias;
};

// The gradients of the training forward with the given mean and invstd.
inline BatchNormGrads batchnorm_grad_ref(const Shape& shape, const std::vector<float>& x, const std::vector<float>& dy,
                                         const std::vector<float>& scale, const std::vector<double>& mean,
                                         const std::vector<double>& invstd) {
  const int64_t c_count = shape[1];
  const double count = static_cast<double>(product(shape) / c_count);
  BatchNormGrads g{std::vector<double>(x.size()), std::vector<double>(c_count, 0.0), std::vector<double>(c_count, 0.0)};
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = channel_of(shape, i);
    g.dbias[c] += dy[i];
    g.dscale[c] += dy[i] * (x[i] - mean[c]) * invstd[c];
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = channel_of(shape, i);
    const double xhat = (x[i] - mean[c]) * invstd[c];
    g.dx[i] = scale[c] * invstd[c] * (dy[i] - g.dbias[c] / count - xhat * g.dscale[c] / count);
  }
  return g;
}

// --- SGEMM, column-major ---

inline std::vector<double> sgemm_ref(bool ta, bool tb, int m, int n, int k, double alpha, const std::vector<float>& A,
                                     int lda, const std::vector<float>& B, int ldb, double beta,
                                     const std::vector<float>& C, int ldc) {
  std::vector<double> out(C.begin(), C.end());  // the padding rows beyond m stay as they were
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int l = 0; l < k; ++l) {
        const double a = ta ? A[static_cast<size_t>(i) * lda + l] : A[static_cast<size_t>(l) * lda + i];
        const double b = tb ? B[static_cast<size_t>(l) * ldb + j] : B[static_cast<size_t>(j) * ldb + l];
        acc += a * b;
      }
      const size_t ci = static_cast<size_t>(j) * ldc + i;
      out[ci] = alpha * acc + (beta != 0.0 ? beta * C[ci] : 0.0);
    }
  return out;
}

}  // namespace ooc_test
