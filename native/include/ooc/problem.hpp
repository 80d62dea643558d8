// One operation, described completely: shapes, convolution geometry, dtype, alpha/beta.
// Pure data, no CUDA. Spatial dimensions are always stored as three (unused ones have size 1,
// kernel 1, stride 1, padding 0, dilation 1) so that 1D, 2D and 3D share every loop.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ooc {

constexpr int kMaxSpatial = 3;
using Dims3 = std::array<int64_t, kMaxSpatial>;

enum class DType { float32 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// Forward convolution y = alpha * conv(x, w) + beta * y (+ bias), cuDNN cross-correlation.
// x: [n, c, in...], w: [k, c / groups, kernel...], y: [n, k, out...], NC+spatial, C-contiguous.
struct ConvProblem {
  int spatial_dims = 2;  // 1, 2 or 3
  int64_t n = 1, c = 1, k = 1, groups = 1;
  Dims3 in{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  Dims3 out{1, 1, 1};  // derived by make()
  DType dtype = DType::float32;
  double alpha = 1.0, beta = 0.0;
  bool has_bias = false;

  // Validates every field and derives `out`. Throws ooc::invalid_argument naming the argument.
  // x_shape and w_shape have the same rank, 3 to 5; stride/padding/dilation have one entry per
  // spatial dimension.
  static ConvProblem forward(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                             const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                             const std::vector<int64_t>& dilation, int64_t groups, double alpha,
                             double beta, bool has_bias, DType dtype = DType::float32);

  std::vector<int64_t> x_shape() const;
  std::vector<int64_t> w_shape() const;
  std::vector<int64_t> y_shape() const;
  int64_t x_elements() const;
  int64_t w_elements() const;
  int64_t y_elements() const;
  double flops() const;  // multiply-adds counted as two
  std::string describe() const;
};

}  // namespace ooc
