// One operation, described completely: which one, shapes, convolution geometry, dtype, alpha/beta.
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

// The element type of an operation's tensors. Plans count its bytes (a float16 layer streams half
// of a float32 one's). The convolutions and their gradients run in every dtype on the host backend
// and forward / backward data in every dtype on the cuda backend; the other kernels are float32 so
// far and refuse a chunk of another dtype when it runs (backend/float32_kernels.hpp).
enum class DType { float32, float16, bfloat16 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// What a convolution's padding holds (torch's padding_mode): zeros, or the input continued past its
// border: mirrored without repeating the edge (reflect), the edge repeated (replicate) or wrapped
// around (circular). A non-zero mode is computed exactly by the host gather of x's halo
// (exec/region_copy.hpp's border_source); cuDNN only ever pads with zeros.
enum class PaddingMode { zeros, reflect, replicate, circular };
const char* padding_mode_name(PaddingMode mode);  // torch's spelling: "zeros", "reflect", ...

// Where a tensor keeps its channels in memory (docs/layouts.md). The shapes stay logical, N, C,
// spatial... (torch's and cuDNN's convention); only the strides differ:
//   channels_first  NC(D)HW: C-contiguous over the logical shape
//   channels_last   N(D)HWC: C innermost, then the spatial dims, then N (torch's channels_last and
//                   channels_last_3d; cuDNN's CUDNN_TENSOR_NHWC), for any number of spatial dims.
// A weight [K, C/groups, kernel...] in channels_last keeps C/groups innermost likewise. Plans are
// the same boxes in logical coordinates either way; the chunks' device buffers hold each box
// densely in the layout's order, which the region copies translate (exec/region_copy.hpp).
enum class Layout { channels_first, channels_last };
const char* layout_name(Layout layout);  // "channels_first", "channels_last"
// The dimensions of a rank-`rank` (N, C, spatial...) tensor dense in `layout`, from outermost to
// innermost in memory: 0, 1, 2, ... or 0, 2, ..., rank - 1, 1 (channels-last below rank 3 is
// channels-first). The one statement of the layouts' order: the region copies, cuDNN's chunk
// descriptors and the C API's descriptor checks all read it. rank <= kMaxLayoutRank.
constexpr int kMaxLayoutRank = 8;  // cuDNN's CUDNN_DIM_MAX
std::array<int, kMaxLayoutRank> layout_order(Layout layout, int rank);

// The element count of a tensor of `shape` (positive dims), refused with invalid_argument naming
// `name` when its bytes pass 2^60 (plan/checked_size.hpp): for callers above the planner, such as
// the C API's descriptors.
int64_t checked_tensor_elements(const std::vector<int64_t>& shape, size_t element_size, const std::string& name);

// The convolution and its three gradients (cuDNN's ConvolutionForward, BackwardData,
// BackwardFilter and BackwardBias):
//   forward          y  = alpha * conv(x, w) + beta * y (+ bias)
//   backward_data    dx = alpha * conv_transpose(dy, w) + beta * dx      (dy has y's shape)
//   backward_filter  dw = alpha * sum over n, out of dy (x) x-windows + beta * dw
//   backward_bias    db = alpha * sum over n, out of dy + beta * db      (db: [k])
enum class Operation {
  forward, backward_data, backward_filter, backward_bias,
  // layers.hpp: GEMM (n = M, c = K, k = N) and batch normalization (x: [n, c, in...])
  matmul, batchnorm_forward_training, batchnorm_forward_inference, batchnorm_backward,
  // layers.hpp: element-wise and per-position layers (k == c, out == in)
  activation_forward, activation_backward, softmax_forward, softmax_backward, add_tensor, pool_forward, pool_backward
};
const char* operation_name(Operation op);  // "conv_forward", "conv_backward_data", ...

// One convolution operation, cuDNN cross-correlation, described by its forward geometry:
// x: [n, c, in...], w: [k, c / groups, kernel...], y: [n, k, out...], dense in `layout`.
// The backward operations use the same shapes for their gradients (dx like x, dw like w, dy like y).
struct ConvProblem {
  Operation op = Operation::forward;
  int spatial_dims = 2;  // 1, 2 or 3
  int64_t n = 1, c = 1, k = 1, groups = 1;
  Dims3 in{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  // The padding after each dimension's end minus `padding` (its padding before the start): 0 for
  // cuDNN's symmetric padding; torch's padding='same' with an even dilated kernel pads one more
  // after (1). Chunks pad such a dimension with explicit zeros, never through cuDNN.
  Dims3 padding_extra{0, 0, 0};
  // What the padding holds (set_padding_mode). Forward and backward filter only: backward data
  // with a non-zero mode is the padded input's gradient folded back (pyooc/conv_backward.py).
  PaddingMode padding_mode = PaddingMode::zeros;
  Dims3 out{1, 1, 1};  // derived by make()
  DType dtype = DType::float32;
  double alpha = 1.0, beta = 0.0;
  bool has_bias = false;
  // Of x, w and y alike (and their gradients); the bias is a vector either way. The convolutions
  // serve both; every other operation (and the fused ones) refuses channels_last (not_supported).
  Layout layout = Layout::channels_first;

  // Validates every field and derives `out`. Throws ooc::invalid_argument naming the argument.
  // x_shape and w_shape have the same rank, 3 to 5; stride/padding/dilation have one entry per
  // spatial dimension. padding is before each dimension's start; padding_after, at its end
  // (empty: the same as padding, cuDNN's symmetric padding).
  static ConvProblem forward(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                             const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                             const std::vector<int64_t>& dilation, int64_t groups, double alpha,
                             double beta, bool has_bias, DType dtype = DType::float32,
                             const std::vector<int64_t>& padding_after = {});

  // backward data: dy_shape must be the forward output of x_shape and w_shape. Errors name dy,
  // w and x_shape (torch's wording where torch has one).
  static ConvProblem backward_data(const std::vector<int64_t>& dy_shape, const std::vector<int64_t>& w_shape,
                                   const std::vector<int64_t>& x_shape, const std::vector<int64_t>& stride,
                                   const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                                   int64_t groups, double alpha, double beta, DType dtype = DType::float32,
                                   const std::vector<int64_t>& padding_after = {});
  // backward filter: dy_shape must be the forward output of x_shape and w_shape.
  static ConvProblem backward_filter(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& dy_shape,
                                     const std::vector<int64_t>& w_shape, const std::vector<int64_t>& stride,
                                     const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                                     int64_t groups, double alpha, double beta, DType dtype = DType::float32,
                                     const std::vector<int64_t>& padding_after = {});
  // backward bias: dy is [n, k, out...] (rank 3 to 5); the geometry is a 1x1 convolution from one
  // channel (x: [n, 1, out...]), so that x-, y- and bias-shaped ranges all follow dy's.
  static ConvProblem backward_bias(const std::vector<int64_t>& dy_shape, double alpha, double beta,
                                   DType dtype = DType::float32);

  // The output's element type: the inputs' dtype, except for the gradients reduced over every
  // chunk (backward filter and bias) of a half-precision call, which accumulate in float32 across
  // chunks (the API converts the caller's dw / db at the end; plans count their bytes as float32).
  DType output_dtype() const {
    const bool reduced_over_every_chunk = op == Operation::backward_filter || op == Operation::backward_bias;
    return reduced_over_every_chunk ? DType::float32 : dtype;
  }

  // Whether dimension d pads alike at both ends.
  bool symmetric_padding(int d) const { return padding_extra[d] == 0; }
  // Whether cuDNN can pad dimension d itself when a chunk holds it whole: symmetric zeros (or no
  // padding at all). Any other dimension is padded explicitly by the gather of x's halo.
  bool cudnn_can_pad(int d) const {
    return symmetric_padding(d) && (padding_mode == PaddingMode::zeros || padding[d] == 0);
  }
  // Sets padding_mode after validating it against the geometry, in torch's words (F.pad): reflect
  // needs each padding below its dimension's size, circular at most its size. Throws
  // invalid_argument naming padding_mode; backward data and backward bias take zeros only.
  void set_padding_mode(PaddingMode mode);

  std::vector<int64_t> x_shape() const;
  std::vector<int64_t> w_shape() const;
  std::vector<int64_t> y_shape() const;
  int64_t x_elements() const;
  int64_t w_elements() const;
  int64_t y_elements() const;
  double flops() const;  // multiply-adds counted as two (backward bias: one add per dy element)
  std::string describe() const;
};

// GEMM (layers.hpp's matmul): n = M, c = K, k = N. a_shape is op(a)'s [M, K], b_shape op(b)'s
// [K, N]; a mismatch throws invalid_argument in torch's words ("mat1 and mat2 shapes cannot be
// multiplied (2x3 and 4x5)"). a, b, bias and c have `dtype`; a half call multiplies in float32 and
// carries a K reduction split over chunks in a float32 device accumulator (Plan::scratch_bytes).
ConvProblem matmul_problem(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& b_shape, double alpha,
                           double beta, bool has_bias, DType dtype = DType::float32);
// Batch normalization (layers.hpp); op is one of the batchnorm_* operations; x is [n, c, spatial...]
// (rank 2 to 5) of `dtype` (x, dy, y and dx; the per-channel tensors are float32 whatever it is).
// Throws invalid_argument naming x.
ConvProblem batchnorm_problem(Operation op, const std::vector<int64_t>& x_shape, DType dtype = DType::float32);

}  // namespace ooc
