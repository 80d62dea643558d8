// Channels-last helpers of the C API tests (CPU and GPU suites): NHWC descriptors made as a cuDNN
// program makes them, and flat NCHW <-> NHWC transposes for references computed channels-first.
#pragma once

#include <cudnn.h>

#include <vector>

#include "capi_fixtures.hpp"

namespace ooc_test {

// Strides of dims (N, C, spatial...) fully packed channels-last: C innermost.
inline std::vector<int> nhwc_strides(const Shape& dims) {
  const int rank = static_cast<int>(dims.size());
  std::vector<int> strides(dims.size());
  int step = 1;
  strides[1] = step;
  step *= static_cast<int>(dims[1]);
  for (int i = rank - 1; i >= 2; --i) {
    strides[i] = step;
    step *= static_cast<int>(dims[i]);
  }
  strides[0] = step;
  return strides;
}

inline Tensor nhwc_tensor(const Shape& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  return tensor(dims, type, nhwc_strides(dims));
}
inline Filter nhwc_filter(const Shape& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  return filter(dims, type, CUDNN_TENSOR_NHWC);
}

// A flat tensor of dims (N, C, spatial...) moved between NCHW and NHWC order.
template <typename T>
std::vector<T> to_layout(const std::vector<T>& from, const Shape& dims, bool to_nhwc) {
  int64_t space = 1;
  for (size_t i = 2; i < dims.size(); ++i) space *= dims[i];
  const int64_t outer = dims[0], channels = dims[1];
  std::vector<T> to(from.size());
  for (int64_t n = 0; n < outer; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t p = 0; p < space; ++p) {
        const size_t nchw = static_cast<size_t>((n * channels + c) * space + p);
        const size_t nhwc = static_cast<size_t>((n * space + p) * channels + c);
        to[to_nhwc ? nhwc : nchw] = from[to_nhwc ? nchw : nhwc];
      }
  return to;
}

// One convolution's descriptors, all NHWC (the filter CUDNN_TENSOR_NHWC), with its forward
// problem (channels-first shapes, as cuDNN's descriptors give them).
struct NhwcConv {
  ooc::ConvProblem problem;
  Tensor x, y;
  Filter w;
  Convolution conv;
  NhwcConv(const Shape& x_shape, const Shape& w_shape, const Shape& padding, const Shape& stride,
           const Shape& dilation, int groups = 1, cudnnDataType_t type = CUDNN_DATA_FLOAT)
      : problem(ooc::ConvProblem::forward(x_shape, w_shape, stride, padding, dilation, groups, 1.0, 0.0, false)),
        x(nhwc_tensor(x_shape, type)),
        y(nhwc_tensor(problem.y_shape(), type)),
        w(nhwc_filter(w_shape, type)),
        conv(convolution(padding, stride, dilation, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT, groups)) {}
};

}  // namespace ooc_test
