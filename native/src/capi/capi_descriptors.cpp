// cuDNN descriptors read back (cudnnGet*NdDescriptor, cudnnGet*Descriptor) into the shapes and
// settings of the library's problems. Only what the out-of-core path serves passes: packed NCHW (and NHWC
// for the convolutions), float32 or half of the ranks each call allows, cross-correlation.
#include <sstream>

#include "capi/capi_internal.hpp"
#include "ooc/problem.hpp"

namespace ooc::capi {
namespace {

constexpr int kMaxDims = CUDNN_DIM_MAX;  // 8: what cudnnSetTensorNdDescriptor accepts
static_assert(kMaxDims <= kMaxLayoutRank, "layout_order covers every rank a descriptor holds");

void check_read(cudnnStatus_t status, const char* name) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw invalid_argument(std::string(name) + " cannot be read: " + cudnnGetErrorString(status));
}

void check_rank(int rank, const char* name, int min_rank, int max_rank) {
  if (rank == 0) throw invalid_argument(std::string(name) + " has not been set");
  if (rank < min_rank || rank > max_rank)
    throw not_supported(std::string(name) + " has " + std::to_string(rank) + " dimensions; only " +
                        std::to_string(min_rank) + "-D to " + std::to_string(max_rank) +
                        "-D tensors are supported here");
}

// The descriptor's element type: CUDNN_DATA_FLOAT, or where `dtype` is given (the convolutions and
// the layers) also CUDNN_DATA_HALF and CUDNN_DATA_BFLOAT16, reported through it.
void check_type(cudnnDataType_t type, const char* name, DType* dtype) {
  if (dtype && type == CUDNN_DATA_HALF) {
    *dtype = DType::float16;
    return;
  }
  if (dtype && type == CUDNN_DATA_BFLOAT16) {
    *dtype = DType::bfloat16;
    return;
  }
  if (type != CUDNN_DATA_FLOAT)
    throw not_supported(std::string(name) + " has data type " + std::to_string(static_cast<int>(type)) + "; only " +
                        (dtype ? "CUDNN_DATA_FLOAT, CUDNN_DATA_HALF and CUDNN_DATA_BFLOAT16 are"
                               : "CUDNN_DATA_FLOAT is") +
                        " supported");
  if (dtype) *dtype = DType::float32;
}

}  // namespace

std::string format_shape(const Shape& shape) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < shape.size(); ++i) o << (i ? ", " : "") << shape[i];
  o << "]";
  return o.str();
}

void same_dtype(DType type, const char* name, DType first, const char* first_name, const char* call) {
  if (type != first)
    throw not_supported(std::string(name) + " has data type " + dtype_name(type) + ", " + first_name + " " +
                        dtype_name(first) + ": mixed data types in " + call + " are not supported");
}

int64_t elements(const Shape& shape) { return checked_tensor_elements(shape, sizeof(float), "a tensor"); }

// Whether strides are those of dims fully packed in `layout` (NCHW, or NHWC: C innermost). A dim
// of size 1 is never stepped over, so its stride does not matter (torch and cuDNN itself leave
// odd ones there).
static bool packed_in(const int* dims, const int* strides, int rank, Layout layout) {
  const auto order = layout_order(layout, rank);  // outermost to innermost in memory
  int64_t packed = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int d = order[i];
    if (dims[d] != 1 && strides[d] != packed) return false;
    packed *= dims[d];
  }
  return true;
}

Shape tensor_shape(cudnnTensorDescriptor_t desc, const char* name, int min_rank, int max_rank, DType* dtype,
                   LayoutSet* layouts) {
  if (!desc) throw invalid_argument(std::string(name) + " is null");
  cudnnDataType_t type{};
  int rank = 0, dims[kMaxDims] = {}, strides[kMaxDims] = {};
  check_read(cudnnGetTensorNdDescriptor(desc, kMaxDims, &type, &rank, dims, strides), name);
  check_rank(rank, name, min_rank, max_rank);
  check_type(type, name, dtype);
  Shape shape(dims, dims + rank);
  for (int64_t d : shape)
    if (d <= 0) throw invalid_argument(std::string(name) + " has a non-positive dimension: " + format_shape(shape));
  checked_tensor_elements(shape, sizeof(float), name);  // CUDNN_STATUS_BAD_PARAM, before the strides multiply
  const LayoutSet found{packed_in(dims, strides, rank, Layout::channels_first),
                        packed_in(dims, strides, rank, Layout::channels_last)};
  if (found.channels_first || (layouts && found.channels_last)) {
    if (layouts) *layouts = found;
    return shape;
  }
  Shape s(strides, strides + rank);
  throw not_supported(std::string(name) + " has strides " + format_shape(s) + " for dims " + format_shape(shape) +
                      (layouts ? "; only fully-packed NCHW or NHWC tensors are supported"
                               : "; only fully-packed NCHW tensors are supported (NHWC: the convolutions and "
                                 "batch norm)"));
}

Layout common_layout(const std::vector<std::pair<LayoutSet, const char*>>& descriptors, const char* call) {
  bool first = true, last = true;
  for (const auto& [set, name] : descriptors) {
    first = first && set.channels_first;
    last = last && set.channels_last;
  }
  if (first) return Layout::channels_first;
  if (last) return Layout::channels_last;
  std::string names;
  for (const auto& [set, name] : descriptors)
    names += std::string(names.empty() ? "" : ", ") + name + (set.channels_last && !set.channels_first ? " NHWC" : " NCHW");
  throw not_supported(std::string(call) + " mixes layouts (" + names + "): one call takes one layout");
}

Shape filter_shape(cudnnFilterDescriptor_t desc, const char* name, DType* dtype, LayoutSet* layouts) {
  if (!desc) throw invalid_argument(std::string(name) + " is null");
  cudnnDataType_t type{};
  cudnnTensorFormat_t format{};
  int rank = 0, dims[kMaxDims] = {};
  check_read(cudnnGetFilterNdDescriptor(desc, kMaxDims, &type, &format, &rank, dims), name);
  check_rank(rank, name, 4, 5);
  check_type(type, name, dtype);
  const bool nhwc = format == CUDNN_TENSOR_NHWC;
  if (format != CUDNN_TENSOR_NCHW && !(layouts && nhwc))
    throw not_supported(std::string(name) + " is not in CUDNN_TENSOR_NCHW format; only NCHW filters are supported" +
                        (layouts ? " (and NHWC)" : " here"));
  Shape shape(dims, dims + rank);
  for (int64_t d : shape)
    if (d <= 0) throw invalid_argument(std::string(name) + " has a non-positive dimension: " + format_shape(shape));
  checked_tensor_elements(shape, sizeof(float), name);
  if (layouts) {  // the format names the layout; C/g == 1 or a 1x1 kernel stores both alike
    int64_t kernel = 1;
    for (size_t i = 2; i < shape.size(); ++i) kernel *= shape[i];
    const bool both = shape[1] == 1 || kernel == 1;
    *layouts = LayoutSet{!nhwc || both, nhwc || both};
  }
  return shape;
}

ConvGeometry conv_geometry(cudnnConvolutionDescriptor_t desc, size_t spatial_dims) {
  if (!desc) throw invalid_argument("convDesc is null");
  constexpr int kMaxSpatialDims = CUDNN_DIM_MAX - 2;
  int length = 0, pad[kMaxSpatialDims] = {}, stride[kMaxSpatialDims] = {}, dilation[kMaxSpatialDims] = {};
  cudnnConvolutionMode_t mode{};
  cudnnDataType_t compute{};
  check_read(cudnnGetConvolutionNdDescriptor(desc, kMaxSpatialDims, &length, pad, stride, dilation, &mode, &compute),
             "convDesc");
  if (length == 0) throw invalid_argument("convDesc has not been set");
  if (static_cast<size_t>(length) != spatial_dims)
    throw invalid_argument("convDesc has " + std::to_string(length) + " spatial dimensions, the tensors have " +
                           std::to_string(spatial_dims));
  if (mode != CUDNN_CROSS_CORRELATION)
    throw not_supported("convDesc: only CUDNN_CROSS_CORRELATION is supported (CUDNN_CONVOLUTION flips the filter)");
  if (compute != CUDNN_DATA_FLOAT) throw not_supported("convDesc: only a CUDNN_DATA_FLOAT compute type is supported");
  int groups = 1;
  check_read(cudnnGetConvolutionGroupCount(desc, &groups), "convDesc");
  ConvGeometry g;
  g.groups = groups;
  g.stride.assign(stride, stride + length);
  g.padding.assign(pad, pad + length);
  g.dilation.assign(dilation, dilation + length);
  return g;
}

MathMode conv_math_mode(cudnnConvolutionDescriptor_t desc) {
  if (!desc) throw invalid_argument("convDesc is null");
  cudnnMathType_t math{};
  check_read(cudnnGetConvolutionMathType(desc, &math), "convDesc");
  return math == CUDNN_FMA_MATH ? MathMode::fp32 : MathMode::tf32;
}

ActivationSetting activation_setting(cudnnActivationDescriptor_t desc, const char* name) {
  if (!desc) throw invalid_argument(std::string(name) + " is null");
  ActivationSetting a;
  check_read(cudnnGetActivationDescriptor(desc, &a.mode, &a.nan, &a.coef), name);
  if (a.mode == CUDNN_ACTIVATION_SWISH) check_read(cudnnGetActivationDescriptorSwishBeta(desc, &a.swish_beta), name);
  return a;
}

PoolingSetting pooling_setting(cudnnPoolingDescriptor_t desc, size_t spatial_dims) {
  if (!desc) throw invalid_argument("poolingDesc is null");
  constexpr int kMaxSpatialDims = CUDNN_DIM_MAX - 2;
  PoolingSetting s;
  cudnnNanPropagation_t nan{};
  int length = 0, window[kMaxSpatialDims] = {}, pad[kMaxSpatialDims] = {}, stride[kMaxSpatialDims] = {};
  check_read(cudnnGetPoolingNdDescriptor(desc, kMaxSpatialDims, &s.mode, &nan, &length, window, pad, stride),
             "poolingDesc");
  if (length == 0) throw invalid_argument("poolingDesc has not been set");
  if (static_cast<size_t>(length) != spatial_dims)
    throw invalid_argument("poolingDesc has " + std::to_string(length) + " spatial dimensions, the tensors have " +
                           std::to_string(spatial_dims));
  s.window.assign(window, window + length);
  s.padding.assign(pad, pad + length);
  s.stride.assign(stride, stride + length);
  return s;
}

void same_rank(const Shape& a, const char* a_name, const Shape& b, const char* b_name) {
  if (a.size() != b.size())
    throw invalid_argument(std::string(a_name) + " has " + std::to_string(a.size()) + " dimensions, " + b_name +
                           " has " + std::to_string(b.size()));
}

void expect_shape(const Shape& got, const Shape& want, const char* name) {
  if (got != want)
    throw invalid_argument(std::string(name) + " is " + format_shape(got) + ", expected " + format_shape(want));
}

void require_pointer(const void* ptr, const char* name) {
  if (!ptr) throw invalid_argument(std::string(name) + " is null");
}

void require_pointers(std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [ptr, name] : pointers) require_pointer(ptr, name);
}

}  // namespace ooc::capi
