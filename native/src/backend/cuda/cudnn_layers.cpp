#include "backend/cuda/cudnn_layers.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"

namespace ooc::cudnn_layers {
namespace {

int as_int(int64_t v) {
  if (v > std::numeric_limits<int>::max()) throw std::logic_error("cudnn layers: chunk dimension exceeds int");
  return static_cast<int>(v);
}

// The chunk as NCHW with all of space in H: element-wise ops and both softmax modes (channel: over
// C per (N, H, W); instance: over C, H, W per N) mean the same on it as on the N-d tensor.
// The chunk's element type as cuDNN names it (half precision: cuDNN computes in float32, the
// scaling factors staying float).
cudnnDataType_t data_type(DType dtype) {
  return dtype == DType::float16 ? CUDNN_DATA_HALF : dtype == DType::bfloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

void set_flat(const TensorDescriptor& d, const ChunkConv& s) {
  OOC_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, data_type(s.dtype), as_int(s.n), as_int(s.c),
                                             as_int(s.in[0] * s.in[1] * s.in[2]), 1));
}

// A dense (packed) tensor of rank dims (4 or 5) of `dtype`, in `layout` (pooling chunks may be
// channels-last; the other layers' chunks are channels-first).
void set_packed(const TensorDescriptor& d, const int* dims, int rank, DType dtype,
                Layout layout = Layout::channels_first) {
  int strides[5];
  packed_strides(dims, rank, layout, strides);
  OOC_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d, data_type(dtype), rank, dims, strides));
}

// All five dims (add_tensor broadcasts per dimension).
void set_5d(const TensorDescriptor& d, const ChunkConv& s) {
  const int dims[5] = {as_int(s.n), as_int(s.c), as_int(s.in[0]), as_int(s.in[1]), as_int(s.in[2])};
  set_packed(d, dims, 5, s.dtype);
}

// cuDNN's mode for an activation; false where cuDNN has none.
bool cudnn_mode(ActivationMode mode, cudnnActivationMode_t* m) {
  switch (mode) {
    case ActivationMode::relu: *m = CUDNN_ACTIVATION_RELU; return true;
    case ActivationMode::sigmoid: *m = CUDNN_ACTIVATION_SIGMOID; return true;
    case ActivationMode::tanh: *m = CUDNN_ACTIVATION_TANH; return true;
    case ActivationMode::clipped_relu: *m = CUDNN_ACTIVATION_CLIPPED_RELU; return true;
    case ActivationMode::elu: *m = CUDNN_ACTIVATION_ELU; return true;
    case ActivationMode::swish: *m = CUDNN_ACTIVATION_SWISH; return true;
    default: return false;  // layer_kernels.hpp runs the others
  }
}

void set_activation(const ActivationDescriptor& d, ActivationMode mode, double coef) {
  cudnnActivationMode_t m = CUDNN_ACTIVATION_RELU;
  if (!cudnn_mode(mode, &m)) throw std::logic_error("cudnn_layers: cuDNN has no such activation mode");
  OOC_CUDNN_CHECK(cudnnSetActivationDescriptor(d, m, CUDNN_PROPAGATE_NAN, coef));
  if (mode == ActivationMode::swish) OOC_CUDNN_CHECK(cudnnSetActivationDescriptorSwishBeta(d, coef));
}

cudnnSoftmaxAlgorithm_t algorithm(bool log) { return log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE; }
cudnnSoftmaxMode_t softmax_mode(SoftmaxMode m) {
  return m == SoftmaxMode::channel ? CUDNN_SOFTMAX_MODE_CHANNEL : CUDNN_SOFTMAX_MODE_INSTANCE;
}

}  // namespace

bool has_activation(ActivationMode mode) {
  cudnnActivationMode_t m;
  return cudnn_mode(mode, &m);
}

void activation_forward(cudnnHandle_t handle, const ChunkConv& shape, ActivationMode mode, double coef,
                        const void* x, void* y, Scaling k) {
  ActivationDescriptor act;
  set_activation(act, mode, coef);
  TensorDescriptor t;
  set_flat(t, shape);
  OOC_CUDNN_CHECK(cudnnActivationForward(handle, act, &k.alpha, t, x, &k.beta, t, y));
}

void activation_backward(cudnnHandle_t handle, const ChunkConv& shape, ActivationMode mode, double coef,
                         const void* y, const void* dy, const void* x, void* dx, Scaling k) {
  ActivationDescriptor act;
  set_activation(act, mode, coef);
  TensorDescriptor t;
  set_flat(t, shape);
  OOC_CUDNN_CHECK(cudnnActivationBackward(handle, act, &k.alpha, t, y, t, dy, t, x, &k.beta, t, dx));
}

void softmax_forward(cudnnHandle_t handle, const ChunkConv& shape, SoftmaxMode mode, bool log, const void* x,
                     void* y, Scaling k) {
  TensorDescriptor t;
  set_flat(t, shape);
  OOC_CUDNN_CHECK(cudnnSoftmaxForward(handle, algorithm(log), softmax_mode(mode), &k.alpha, t, x, &k.beta, t, y));
}

void softmax_backward(cudnnHandle_t handle, const ChunkConv& shape, SoftmaxMode mode, bool log, const void* y,
                      const void* dy, void* dx, Scaling k) {
  TensorDescriptor t;
  set_flat(t, shape);
  OOC_CUDNN_CHECK(
      cudnnSoftmaxBackward(handle, algorithm(log), softmax_mode(mode), &k.alpha, t, y, t, dy, &k.beta, t, dx));
}

namespace {

// cuDNN pools 2 or 3 spatial dims: 1D runs as 2D with a leading unit dim.
struct PoolingSetup {
  PoolingDescriptor pool;
  TensorDescriptor x, y;
  PoolingSetup(const ChunkConv& s, PoolMode mode) {
    const int sd = std::max(s.spatial_dims, 2), lead = sd - s.spatial_dims;
    int window[3], pad[3], stride[3], xdims[5], ydims[5];
    xdims[0] = ydims[0] = as_int(s.n);
    xdims[1] = ydims[1] = as_int(s.c);
    for (int d = 0; d < sd; ++d) {
      const int src = d - lead;  // -1: the unit dim
      window[d] = src < 0 ? 1 : as_int(s.kernel[src]);
      pad[d] = src < 0 ? 0 : as_int(s.padding[src]);
      stride[d] = src < 0 ? 1 : as_int(s.stride[src]);
      xdims[2 + d] = src < 0 ? 1 : as_int(s.in[src]);
      ydims[2 + d] = src < 0 ? 1 : as_int(s.out[src]);
    }
    const cudnnPoolingMode_t m = mode == PoolMode::max ? CUDNN_POOLING_MAX
                                 : mode == PoolMode::avg ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                         : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    OOC_CUDNN_CHECK(cudnnSetPoolingNdDescriptor(pool, m, CUDNN_PROPAGATE_NAN, sd, window, pad, stride));
    set_packed(x, xdims, 2 + sd, s.dtype, s.layout);
    set_packed(y, ydims, 2 + sd, s.dtype, s.layout);
  }
};

}  // namespace

void pool_forward(cudnnHandle_t handle, const ChunkConv& s, PoolMode mode, const void* x, void* y, Scaling k) {
  const PoolingSetup setup(s, mode);
  OOC_CUDNN_CHECK(cudnnPoolingForward(handle, setup.pool, &k.alpha, setup.x, x, &k.beta, setup.y, y));
}

void pool_backward(cudnnHandle_t handle, const ChunkConv& s, PoolMode mode, const void* y, const void* dy,
                   const void* x, void* dx, Scaling k) {
  const PoolingSetup setup(s, mode);
  OOC_CUDNN_CHECK(cudnnPoolingBackward(handle, setup.pool, &k.alpha, setup.y, y, setup.y, dy, setup.x, x, &k.beta,
                                       setup.x, dx));
}

void add_tensor(cudnnHandle_t handle, cudaStream_t stream, const ChunkConv& a_shape, const ChunkConv& out_shape,
                double alpha, const void* a, double beta, const void* b, void* out) {
  const int64_t elements = out_shape.n * out_shape.c * out_shape.in[0] * out_shape.in[1] * out_shape.in[2];
  if (b && beta != 0.0)
    OOC_CUDA_CHECK(cudaMemcpyAsync(out, b, static_cast<size_t>(elements) * dtype_size(out_shape.dtype),
                                   cudaMemcpyDeviceToDevice, stream));
  TensorDescriptor ad, od;
  set_5d(ad, a_shape);
  set_5d(od, out_shape);
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  OOC_CUDNN_CHECK(cudnnAddTensor(handle, &alpha_f, ad, a, &beta_f, od, out));
}

}  // namespace ooc::cudnn_layers
