#include "backend/host/host_conv.hpp"

#include <vector>

#include "backend/host/host_elements.hpp"

namespace ooc {

namespace {

using host_elements::load;
using host_elements::store;

// out = alpha * acc + beta * out, never reading out when beta == 0 (cuDNN's blending).
template <typename Out, typename Acc>
void blend(Out* out, const Acc* acc, int64_t count, double alpha, double beta) {
  for (int64_t i = 0; i < count; ++i) {
    const double prior = beta != 0.0 ? beta * static_cast<double>(load(out[i])) : 0.0;
    out[i] = store<Out>(static_cast<float>(alpha * static_cast<double>(acc[i]) + prior));
  }
}

// Calls fn(o, i) for each output row o whose tap (offset j) lands inside the input: i = o * stride
// - padding + j * dilation in [0, in). The loops of every kernel below, one spatial dim at a time.
template <typename Fn>
void for_taps(int64_t out, int64_t in, int64_t stride, int64_t padding, int64_t offset, Fn fn) {
  for (int64_t o = 0; o < out; ++o) {
    const int64_t i = o * stride - padding + offset;
    if (i >= 0 && i < in) fn(o, i);
  }
}

// A grouped chunk's channel blocks: output channel k reads input channels [first_c(k), + c_per_group)
// through w's row k of c_per_group columns (w is [k, c / groups, kernel...]).
struct Groups {
  int64_t c_per_group, k_per_group;
  explicit Groups(const ChunkConv& s) : c_per_group(s.c / s.groups), k_per_group(s.k / s.groups) {}
  int64_t first_c(int64_t k) const { return k / k_per_group * c_per_group; }
};

template <typename In, typename Out>
void conv_forward(const ChunkConv& s, const In* x, const In* w, const In* bias, Out* y, double alpha, double beta,
                  ThreadPool& pool) {
  const int64_t in_plane = s.in[0] * s.in[1] * s.in[2];
  const int64_t out_plane = s.out[0] * s.out[1] * s.out[2];
  const int64_t kernel_size = s.kernel[0] * s.kernel[1] * s.kernel[2];
  const Groups groups(s);
  // One (n, k) output plane per task: independent, so any split over threads is exact.
  pool.parallel_for(s.n * s.k, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(out_plane));
    for (int64_t nk = begin; nk < end; ++nk) {
      const int64_t n = nk / s.k, k = nk % s.k;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < groups.c_per_group; ++j) {
        const In* xc = x + (n * s.c + groups.first_c(k) + j) * in_plane;
        const In* wc = w + (k * groups.c_per_group + j) * kernel_size;
        for (int64_t k0 = 0; k0 < s.kernel[0]; ++k0)
          for (int64_t k1 = 0; k1 < s.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < s.kernel[2]; ++k2) {
              const float wv = load(wc[(k0 * s.kernel[1] + k1) * s.kernel[2] + k2]);
              for_taps(s.out[0], s.in[0], s.stride[0], s.padding[0], k0 * s.dilation[0], [&](int64_t o0, int64_t i0) {
                for_taps(s.out[1], s.in[1], s.stride[1], s.padding[1], k1 * s.dilation[1], [&](int64_t o1, int64_t i1) {
                  const In* xrow = xc + (i0 * s.in[1] + i1) * s.in[2];
                  float* arow = acc.data() + (o0 * s.out[1] + o1) * s.out[2];
                  for_taps(s.out[2], s.in[2], s.stride[2], s.padding[2], k2 * s.dilation[2],
                           [&](int64_t o2, int64_t i2) { arow[o2] += wv * load(xrow[i2]); });
                });
              });
            }
      }
      Out* yp = y + (n * s.k + k) * out_plane;
      const float b = bias ? load(bias[k]) : 0.0f;
      for (int64_t i = 0; i < out_plane; ++i) {
        const double prior = beta != 0.0 ? beta * static_cast<double>(load(yp[i])) : 0.0;
        yp[i] = store<Out>(static_cast<float>(alpha * static_cast<double>(acc[i]) + prior) + b);
      }
    }
  });
}

template <typename In, typename Out>
void conv_backward_data(const ChunkConv& s, const In* dy, const In* w, Out* dx, double alpha, double beta,
                        ThreadPool& pool) {
  const int64_t in_plane = s.in[0] * s.in[1] * s.in[2];
  const int64_t out_plane = s.out[0] * s.out[1] * s.out[2];
  const int64_t kernel_size = s.kernel[0] * s.kernel[1] * s.kernel[2];
  const Groups groups(s);
  // One (n, c) plane of dx per task: each is written by one task only.
  pool.parallel_for(s.n * s.c, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(in_plane));
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t n = nc / s.c, c = nc % s.c;
      const int64_t group = c / groups.c_per_group, column = c % groups.c_per_group;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t k = group * groups.k_per_group; k < (group + 1) * groups.k_per_group; ++k) {
        const In* dyk = dy + (n * s.k + k) * out_plane;
        const In* wk = w + (k * groups.c_per_group + column) * kernel_size;
        for (int64_t k0 = 0; k0 < s.kernel[0]; ++k0)
          for (int64_t k1 = 0; k1 < s.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < s.kernel[2]; ++k2) {
              const float wv = load(wk[(k0 * s.kernel[1] + k1) * s.kernel[2] + k2]);
              for_taps(s.out[0], s.in[0], s.stride[0], s.padding[0], k0 * s.dilation[0], [&](int64_t o0, int64_t i0) {
                for_taps(s.out[1], s.in[1], s.stride[1], s.padding[1], k1 * s.dilation[1], [&](int64_t o1, int64_t i1) {
                  const In* dyrow = dyk + (o0 * s.out[1] + o1) * s.out[2];
                  float* arow = acc.data() + (i0 * s.in[1] + i1) * s.in[2];
                  for_taps(s.out[2], s.in[2], s.stride[2], s.padding[2], k2 * s.dilation[2],
                           [&](int64_t o2, int64_t i2) { arow[i2] += wv * load(dyrow[o2]); });
                });
              });
            }
      }
      blend(dx + (n * s.c + c) * in_plane, acc.data(), in_plane, alpha, beta);
    }
  });
}

template <typename In, typename Out>
void conv_backward_filter(const ChunkConv& s, const In* x, const In* dy, Out* dw, double alpha, double beta,
                          ThreadPool& pool) {
  const int64_t in_plane = s.in[0] * s.in[1] * s.in[2];
  const int64_t out_plane = s.out[0] * s.out[1] * s.out[2];
  const int64_t kernel_size = s.kernel[0] * s.kernel[1] * s.kernel[2];
  const Groups groups(s);
  // One (k, column) filter per task (dw is [k, c / groups, kernel...]). Rows are summed in float,
  // rows and samples in double: the reduction runs over the whole chunk (n and space), far longer
  // than the forward's.
  pool.parallel_for(s.k * groups.c_per_group, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(kernel_size));
    for (int64_t kc = begin; kc < end; ++kc) {
      const int64_t k = kc / groups.c_per_group, column = kc % groups.c_per_group;
      const int64_t c = groups.first_c(k) + column;
      for (int64_t k0 = 0; k0 < s.kernel[0]; ++k0)
        for (int64_t k1 = 0; k1 < s.kernel[1]; ++k1)
          for (int64_t k2 = 0; k2 < s.kernel[2]; ++k2) {
            double sum = 0;
            for (int64_t n = 0; n < s.n; ++n) {
              const In* dyk = dy + (n * s.k + k) * out_plane;
              const In* xc = x + (n * s.c + c) * in_plane;
              for_taps(s.out[0], s.in[0], s.stride[0], s.padding[0], k0 * s.dilation[0], [&](int64_t o0, int64_t i0) {
                for_taps(s.out[1], s.in[1], s.stride[1], s.padding[1], k1 * s.dilation[1], [&](int64_t o1, int64_t i1) {
                  const In* dyrow = dyk + (o0 * s.out[1] + o1) * s.out[2];
                  const In* xrow = xc + (i0 * s.in[1] + i1) * s.in[2];
                  float row = 0.0f;
                  for_taps(s.out[2], s.in[2], s.stride[2], s.padding[2], k2 * s.dilation[2],
                           [&](int64_t o2, int64_t i2) { row += load(dyrow[o2]) * load(xrow[i2]); });
                  sum += row;
                });
              });
            }
            acc[static_cast<size_t>((k0 * s.kernel[1] + k1) * s.kernel[2] + k2)] = sum;
          }
      blend(dw + kc * kernel_size, acc.data(), kernel_size, alpha, beta);
    }
  });
}

template <typename In, typename Out>
void conv_backward_bias(const ChunkConv& s, const In* dy, Out* db, double alpha, double beta, ThreadPool& pool) {
  const int64_t out_plane = s.out[0] * s.out[1] * s.out[2];
  pool.parallel_for(s.k, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      double sum = 0;
      for (int64_t n = 0; n < s.n; ++n) {
        const In* plane = dy + (n * s.k + k) * out_plane;
        float row = 0.0f;
        for (int64_t i = 0; i < out_plane; ++i) row += load(plane[i]);
        sum += row;
      }
      blend(db + k, &sum, 1, alpha, beta);
    }
  });
}

// Calls fn(In{}, Out{}) with the chunk's input and output element types (they differ only where a
// reduction keeps float32 for a half-precision call: ChunkConv::out_dtype).
template <typename Fn>
void with_types(const ChunkConv& s, Fn fn) {
  host_elements::with_type(s.dtype, [&](auto in) {
    host_elements::with_type(s.out_dtype, [&](auto out) { fn(in, out); });
  });
}

}  // namespace

void host_conv_forward(const ChunkConv& s, const void* x, const void* w, const void* bias, void* y, double alpha,
                       double beta, ThreadPool& pool) {
  with_types(s, [&](auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    conv_forward(s, static_cast<const In*>(x), static_cast<const In*>(w), static_cast<const In*>(bias),
                 static_cast<Out*>(y), alpha, beta, pool);
  });
}

void host_conv_backward_data(const ChunkConv& s, const void* dy, const void* w, void* dx, double alpha, double beta,
                             ThreadPool& pool) {
  with_types(s, [&](auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    conv_backward_data(s, static_cast<const In*>(dy), static_cast<const In*>(w), static_cast<Out*>(dx), alpha, beta,
                       pool);
  });
}

void host_conv_backward_filter(const ChunkConv& s, const void* x, const void* dy, void* dw, double alpha,
                               double beta, ThreadPool& pool) {
  with_types(s, [&](auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    conv_backward_filter(s, static_cast<const In*>(x), static_cast<const In*>(dy), static_cast<Out*>(dw), alpha, beta,
                         pool);
  });
}

void host_conv_backward_bias(const ChunkConv& s, const void* dy, void* db, double alpha, double beta,
                             ThreadPool& pool) {
  with_types(s, [&](auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    conv_backward_bias(s, static_cast<const In*>(dy), static_cast<Out*>(db), alpha, beta, pool);
  });
}

}  // namespace ooc
