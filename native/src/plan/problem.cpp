#include "ooc/problem.hpp"

#include <algorithm>
#include <sstream>
#include <string>

#include "ooc/errors.hpp"
#include "plan/conv_geometry.hpp"
#include "plan/layer_problems.hpp"
#include "plan/checked_size.hpp"
#include "plan/shape_format.hpp"

namespace ooc {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float32: return 4;
    case DType::float16: case DType::bfloat16: return 2;
  }
  return 0;
}

int64_t checked_tensor_elements(const std::vector<int64_t>& shape, size_t element_size, const std::string& name) {
  return checked::tensor_elements(shape, element_size, name);
}

const char* padding_mode_name(PaddingMode mode) {
  switch (mode) {
    case PaddingMode::zeros: return "zeros";
    case PaddingMode::reflect: return "reflect";
    case PaddingMode::replicate: return "replicate";
    case PaddingMode::circular: return "circular";
  }
  return "?";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
  }
  return "?";
}

const char* layout_name(Layout layout) {
  return layout == Layout::channels_last ? "channels_last" : "channels_first";
}

std::array<int, kMaxLayoutRank> layout_order(Layout layout, int rank) {
  std::array<int, kMaxLayoutRank> order{};
  for (int i = 0; i < kMaxLayoutRank; ++i) order[i] = i;
  if (layout != Layout::channels_last || rank < 3) return order;
  for (int i = 1; i < rank - 1; ++i) order[i] = i + 1;
  order[rank - 1] = 1;
  return order;
}

const char* operation_name(Operation op) {
  switch (op) {
    case Operation::forward: return "conv_forward";
    case Operation::backward_data: return "conv_backward_data";
    case Operation::backward_filter: return "conv_backward_filter";
    case Operation::backward_bias: return "conv_backward_bias";
    case Operation::matmul: return "matmul";
    case Operation::batchnorm_forward_training: return "batchnorm_forward_training";
    case Operation::batchnorm_forward_inference: return "batchnorm_forward_inference";
    case Operation::batchnorm_backward: return "batchnorm_backward";
    case Operation::activation_forward: return "activation_forward";
    case Operation::activation_backward: return "activation_backward";
    case Operation::softmax_forward: return "softmax_forward";
    case Operation::softmax_backward: return "softmax_backward";
    case Operation::add_tensor: return "add_tensor";
    case Operation::pool_forward: return "pool_forward";
    case Operation::pool_backward: return "pool_backward";
  }
  return "?";
}

namespace {

// Expands a per-dimension option given with 1 or spatial_dims entries.
Dims3 spatial_option(const std::vector<int64_t>& values, int spatial_dims, const char* name, int64_t unused) {
  if (values.size() != 1 && values.size() != static_cast<size_t>(spatial_dims)) {
    std::ostringstream msg;
    msg << name << " must have 1 or " << spatial_dims << " elements, got " << values.size();
    throw invalid_argument(msg.str());
  }
  Dims3 out{unused, unused, unused};
  for (int d = 0; d < spatial_dims; ++d) out[d] = values.size() == 1 ? values[0] : values[d];
  return out;
}

}  // namespace

namespace {

// The forward geometry, validated; messages call the input `x_name` (x, or x_shape where the
// caller passes a shape).
ConvProblem forward_geometry(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                             const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                             const std::vector<int64_t>& dilation, int64_t groups, double alpha, double beta,
                             bool has_bias, DType dtype, const std::string& x_name,
                             const std::vector<int64_t>& padding_after) {
  if (w_shape.size() < 3 || w_shape.size() > 5) {
    std::ostringstream msg;
    msg << "w must be 3D, 4D or 5D ([out_channels, in_channels/groups, *kernel]), got w of size "
        << format_shape(w_shape);
    throw invalid_argument(msg.str());
  }
  const int spatial = static_cast<int>(w_shape.size()) - 2;
  if (x_shape.size() != w_shape.size()) {
    std::ostringstream msg;
    msg << "Expected " << w_shape.size() << "D (batched) input " << x_name << " to conv" << spatial
        << "d, but got input of size: " << format_shape(x_shape);
    throw invalid_argument(msg.str());
  }
  for (size_t i = 0; i < x_shape.size(); ++i)
    if (x_shape[i] <= 0)
      throw invalid_argument(x_name + " has a zero or negative dimension: " + format_shape(x_shape));
  for (size_t i = 0; i < w_shape.size(); ++i)
    if (w_shape[i] <= 0) throw invalid_argument("w has a zero or negative dimension: " + format_shape(w_shape));
  if (groups <= 0) throw invalid_argument("non-positive groups is not supported");
  checked::tensor_elements(x_shape, dtype_size(dtype), x_name);
  checked::tensor_elements(w_shape, dtype_size(dtype), "w");

  ConvProblem p;
  p.spatial_dims = spatial;
  p.n = x_shape[0];
  p.c = x_shape[1];
  p.k = w_shape[0];
  p.groups = groups;
  p.dtype = dtype;
  p.alpha = alpha;
  p.beta = beta;
  p.has_bias = has_bias;
  p.stride = spatial_option(stride, spatial, "stride", 1);
  p.padding = spatial_option(padding, spatial, "padding", 0);
  const Dims3 after = padding_after.empty() ? p.padding : spatial_option(padding_after, spatial, "padding_after", 0);
  p.dilation = spatial_option(dilation, spatial, "dilation", 1);
  for (int d = 0; d < spatial; ++d) {
    p.in[d] = x_shape[2 + d];
    p.kernel[d] = w_shape[2 + d];
    if (p.stride[d] <= 0) throw invalid_argument("non-positive stride is not supported");
    if (p.padding[d] < 0 || after[d] < 0) throw invalid_argument("negative padding is not supported");
    p.padding_extra[d] = after[d] - p.padding[d];
    if (p.dilation[d] <= 0) throw invalid_argument("dilation should be greater than zero");
    checked::kernel_int(p.stride[d], "stride");
    checked::kernel_int(p.dilation[d], "dilation");
  }
  if (p.k % groups != 0) {
    std::ostringstream msg;
    msg << "Given groups=" << groups << ", expected w to be divisible by " << groups
        << " at dimension 0, but got w of size " << format_shape(w_shape) << " instead";
    throw invalid_argument(msg.str());
  }
  if (w_shape[1] * groups != p.c) {
    std::ostringstream msg;
    msg << "Given groups=" << groups << ", w of size " << format_shape(w_shape) << ", expected " << x_name
        << format_shape(x_shape) << " to have " << w_shape[1] * groups << " channels, but got " << p.c
        << " channels instead";
    throw invalid_argument(msg.str());
  }
  for (int d = 0; d < spatial; ++d) {
    // conv_output_size's padded input and dilated kernel, checked before it computes them unchecked.
    checked::add(checked::add(p.in[d], checked::mul(2, p.padding[d], "padding"), "the padded input"),
                 p.padding_extra[d], "the padded input");
    checked::add(checked::mul(p.dilation[d], p.kernel[d] - 1, "dilation"), 1, "the dilated kernel");
    p.out[d] = conv_output_size(p.in[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d], p.padding_extra[d]);
    if (p.out[d] <= 0) {
      std::vector<int64_t> padded, span;
      for (int e = 0; e < spatial; ++e) {
        padded.push_back(p.in[e] + 2 * p.padding[e] + p.padding_extra[e]);
        span.push_back(p.dilation[e] * (p.kernel[e] - 1) + 1);
      }
      std::ostringstream msg;
      msg << "Calculated padded input size per channel: " << format_size(padded)
          << ". Kernel size: " << format_size(span) << ". Kernel size can't be greater than actual input size";
      throw invalid_argument(msg.str());
    }
  }
  checked::tensor_elements(p.y_shape(), dtype_size(dtype), "the output");
  return p;
}

}  // namespace

ConvProblem ConvProblem::forward(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                                 const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                 const std::vector<int64_t>& dilation, int64_t groups, double alpha, double beta,
                                 bool has_bias, DType dtype, const std::vector<int64_t>& padding_after) {
  return forward_geometry(x_shape, w_shape, stride, padding, dilation, groups, alpha, beta, has_bias, dtype, "x",
                          padding_after);
}

namespace {

// The gradient dy of a backward operation has the forward output's shape.
void check_dy_shape(const ConvProblem& p, const std::vector<int64_t>& dy_shape, const std::vector<int64_t>& x_shape,
                    const std::vector<int64_t>& w_shape, const char* x_name) {
  if (dy_shape == p.y_shape()) return;
  std::ostringstream msg;
  msg << "Expected dy of size " << format_shape(p.y_shape()) << " (the output of conv" << p.spatial_dims << "d for "
      << x_name << " " << format_shape(x_shape) << " and w of size " << format_shape(w_shape)
      << "), but got dy of size " << format_shape(dy_shape);
  throw invalid_argument(msg.str());
}

}  // namespace

ConvProblem ConvProblem::backward_data(const std::vector<int64_t>& dy_shape, const std::vector<int64_t>& w_shape,
                                       const std::vector<int64_t>& x_shape, const std::vector<int64_t>& stride,
                                       const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                                       int64_t groups, double alpha, double beta, DType dtype,
                                       const std::vector<int64_t>& padding_after) {
  ConvProblem p = forward_geometry(x_shape, w_shape, stride, padding, dilation, groups, alpha, beta, false, dtype,
                                   "x_shape", padding_after);
  check_dy_shape(p, dy_shape, x_shape, w_shape, "x_shape");
  p.op = Operation::backward_data;
  return p;
}

ConvProblem ConvProblem::backward_filter(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& dy_shape,
                                         const std::vector<int64_t>& w_shape, const std::vector<int64_t>& stride,
                                         const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                                         int64_t groups, double alpha, double beta, DType dtype,
                                         const std::vector<int64_t>& padding_after) {
  ConvProblem p = forward(x_shape, w_shape, stride, padding, dilation, groups, alpha, beta, false, dtype, padding_after);
  check_dy_shape(p, dy_shape, x_shape, w_shape, "x of size");
  p.op = Operation::backward_filter;
  return p;
}

ConvProblem ConvProblem::backward_bias(const std::vector<int64_t>& dy_shape, double alpha, double beta, DType dtype) {
  if (dy_shape.size() < 3 || dy_shape.size() > 5) {
    std::ostringstream msg;
    msg << "dy must be 3D, 4D or 5D ([batch, channels, *spatial]), got dy of size " << format_shape(dy_shape);
    throw invalid_argument(msg.str());
  }
  for (int64_t v : dy_shape)
    if (v <= 0) throw invalid_argument("dy has a zero or negative dimension: " + format_shape(dy_shape));
  checked::tensor_elements(dy_shape, dtype_size(dtype), "dy");
  // The geometry of a 1x1 convolution from one channel to k: x and y have the same spatial
  // extent, so every spatial range the planner derives is dy's own.
  std::vector<int64_t> x_shape = dy_shape, w_shape(dy_shape.size(), 1);
  x_shape[1] = 1;
  w_shape[0] = dy_shape[1];
  ConvProblem p = forward(x_shape, w_shape, {1}, {0}, {1}, 1, alpha, beta, false, dtype);
  p.op = Operation::backward_bias;
  return p;
}

std::vector<int64_t> ConvProblem::x_shape() const {
  std::vector<int64_t> s{n, c};
  for (int d = 0; d < spatial_dims; ++d) s.push_back(in[d]);
  return s;
}

std::vector<int64_t> ConvProblem::w_shape() const {
  std::vector<int64_t> s{k, c / groups};
  for (int d = 0; d < spatial_dims; ++d) s.push_back(kernel[d]);
  return s;
}

std::vector<int64_t> ConvProblem::y_shape() const {
  std::vector<int64_t> s{n, k};
  for (int d = 0; d < spatial_dims; ++d) s.push_back(out[d]);
  return s;
}

int64_t ConvProblem::x_elements() const { return n * c * in[0] * in[1] * in[2]; }
int64_t ConvProblem::w_elements() const { return k * (c / groups) * kernel[0] * kernel[1] * kernel[2]; }
int64_t ConvProblem::y_elements() const { return n * k * out[0] * out[1] * out[2]; }

double ConvProblem::flops() const {
  if (op == Operation::backward_bias) return static_cast<double>(y_elements());
  if (op > Operation::backward_bias) return 8.0 * static_cast<double>(y_elements());  // layers: a few flops per element
  return 2.0 * static_cast<double>(y_elements()) * static_cast<double>(c / groups) *
         static_cast<double>(kernel[0] * kernel[1] * kernel[2]);
}

std::string ConvProblem::describe() const {
  std::ostringstream s;
  if (op >= Operation::matmul && op <= Operation::batchnorm_backward) return describe_layer(*this);  // GEMM, batch norm
  if (op > Operation::backward_bias) {  // layers.hpp: element-wise and per-position layers
    s << operation_name(op) << " " << dtype_name(dtype) << ": " << format_shape(x_shape());
    return s.str();
  }
  s << "conv" << spatial_dims << "d ";
  if (layout == Layout::channels_last) s << "channels_last ";
  switch (op) {
    case Operation::forward:
      s << "forward " << dtype_name(dtype) << ": x" << format_shape(x_shape()) << " * w" << format_shape(w_shape())
        << " -> y" << format_shape(y_shape());
      break;
    case Operation::backward_data:
      s << "backward data " << dtype_name(dtype) << ": dy" << format_shape(y_shape()) << " * w"
        << format_shape(w_shape()) << " -> dx" << format_shape(x_shape());
      break;
    case Operation::backward_filter:
      s << "backward filter " << dtype_name(dtype) << ": x" << format_shape(x_shape()) << " * dy"
        << format_shape(y_shape()) << " -> dw" << format_shape(w_shape());
      break;
    case Operation::backward_bias:
      s << "backward bias " << dtype_name(dtype) << ": dy" << format_shape(y_shape()) << " -> db[" << k << "]";
      if (alpha != 1.0 || beta != 0.0) s << ", alpha=" << alpha << " beta=" << beta;
      return s.str();
    default: break;
  }
  std::vector<int64_t> st(stride.begin(), stride.begin() + spatial_dims),
      pa(padding.begin(), padding.begin() + spatial_dims), di(dilation.begin(), dilation.begin() + spatial_dims);
  s << ", stride=" << format_shape(st) << " padding=" << format_shape(pa);
  bool asymmetric = false;
  for (int d = 0; d < spatial_dims; ++d) asymmetric = asymmetric || !symmetric_padding(d);
  if (asymmetric) {
    std::vector<int64_t> after;
    for (int d = 0; d < spatial_dims; ++d) after.push_back(padding[d] + padding_extra[d]);
    s << " padding_after=" << format_shape(after);
  }
  s << " dilation=" << format_shape(di);
  if (groups != 1) s << " groups=" << groups;
  if (alpha != 1.0 || beta != 0.0) s << " alpha=" << alpha << " beta=" << beta;
  if (padding_mode != PaddingMode::zeros) s << " padding_mode=" << padding_mode_name(padding_mode);
  if (has_bias) s << " +bias";
  return s.str();
}

void ConvProblem::set_padding_mode(PaddingMode mode) {
  if (mode != PaddingMode::zeros && op != Operation::forward && op != Operation::backward_filter)
    throw invalid_argument(std::string("padding_mode='") + padding_mode_name(mode) + "' is not supported by " +
                           operation_name(op) + " (the convolution and its filter gradient take it)");
  for (int d = 0; d < spatial_dims && mode != PaddingMode::zeros && mode != PaddingMode::replicate; ++d) {
    const int64_t before = padding[d], after = padding[d] + padding_extra[d];
    const bool too_large = mode == PaddingMode::reflect ? std::max(before, after) >= in[d]
                                                        : std::max(before, after) > in[d];
    if (!too_large) continue;
    std::ostringstream msg;
    msg << "padding_mode='" << padding_mode_name(mode) << "': ";
    if (mode == PaddingMode::reflect)
      msg << "Padding size should be less than the corresponding input dimension, but got: padding (" << before
          << ", " << after << ") at dimension " << 2 + d << " of input " << format_shape(x_shape());
    else
      msg << "Padding value causes wrapping around more than once: padding (" << before << ", " << after
          << ") at dimension " << 2 + d << " of input " << format_shape(x_shape());
    throw invalid_argument(msg.str());
  }
  padding_mode = mode;
}

}  // namespace ooc
