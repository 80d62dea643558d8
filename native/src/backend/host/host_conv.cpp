#include "backend/host/host_conv.hpp"

#include <vector>

namespace ooc {

void host_conv_forward(const ChunkConv& s, const float* x, const float* w, const float* bias, float* y, double alpha,
                       double beta, ThreadPool& pool) {
  const int64_t in_plane = s.in[0] * s.in[1] * s.in[2];
  const int64_t out_plane = s.out[0] * s.out[1] * s.out[2];
  const int64_t kernel_size = s.kernel[0] * s.kernel[1] * s.kernel[2];
  // One (n, k) output plane per task: independent, so any split over threads is exact.
  pool.parallel_for(s.n * s.k, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(out_plane));
    for (int64_t nk = begin; nk < end; ++nk) {
      const int64_t n = nk / s.k, k = nk % s.k;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t c = 0; c < s.c; ++c) {
        const float* xc = x + (n * s.c + c) * in_plane;
        const float* wc = w + (k * s.c + c) * kernel_size;
        for (int64_t k0 = 0; k0 < s.kernel[0]; ++k0)
          for (int64_t k1 = 0; k1 < s.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < s.kernel[2]; ++k2) {
              const float wv = wc[(k0 * s.kernel[1] + k1) * s.kernel[2] + k2];
              for (int64_t o0 = 0; o0 < s.out[0]; ++o0) {
                const int64_t i0 = o0 * s.stride[0] - s.padding[0] + k0 * s.dilation[0];
                if (i0 < 0 || i0 >= s.in[0]) continue;
                for (int64_t o1 = 0; o1 < s.out[1]; ++o1) {
                  const int64_t i1 = o1 * s.stride[1] - s.padding[1] + k1 * s.dilation[1];
                  if (i1 < 0 || i1 >= s.in[1]) continue;
                  const float* xrow = xc + (i0 * s.in[1] + i1) * s.in[2];
                  float* arow = acc.data() + (o0 * s.out[1] + o1) * s.out[2];
                  for (int64_t o2 = 0; o2 < s.out[2]; ++o2) {
                    const int64_t i2 = o2 * s.stride[2] - s.padding[2] + k2 * s.dilation[2];
                    if (i2 >= 0 && i2 < s.in[2]) arow[o2] += wv * xrow[i2];
                  }
                }
              }
            }
      }
      float* yp = y + (n * s.k + k) * out_plane;
      const float b = bias ? bias[k] : 0.0f;
      for (int64_t i = 0; i < out_plane; ++i) {
        const double prior = beta != 0.0 ? beta * static_cast<double>(yp[i]) : 0.0;
        yp[i] = static_cast<float>(alpha * static_cast<double>(acc[i]) + prior) + b;
      }
    }
  });
}

}  // namespace ooc
