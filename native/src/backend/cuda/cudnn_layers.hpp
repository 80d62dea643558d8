// cuDNN calls of the layers (layers.hpp) on dense device chunks, issued on `stream`; every status
// checked (cudnn_error). Used by the cuda backend's overrides.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/backend.hpp"

namespace ooc::cudnn_layers {

// cuDNN's scaling parameters of one call: out = alpha * result + beta * out (float data: float scalars).
struct Scaling {
  float alpha = 1.0f, beta = 0.0f;
  Scaling(double a, double b) : alpha(static_cast<float>(a)), beta(static_cast<float>(b)) {}
};

// Whether cuDNN has the activation (layer_kernels.hpp runs those it has not).
bool has_activation(ActivationMode mode);
// In the chunk's dtype (half: cuDNN computes in float32).
void activation_forward(cudnnHandle_t handle, const ChunkConv& shape, ActivationMode mode, double coef,
                        const void* x, void* y, Scaling scaling);
void activation_backward(cudnnHandle_t handle, const ChunkConv& shape, ActivationMode mode, double coef,
                         const void* y, const void* dy, const void* x, void* dx, Scaling scaling);
// Softmax and pooling in the chunk's dtype too (half: cuDNN computes in float32).
void softmax_forward(cudnnHandle_t handle, const ChunkConv& shape, SoftmaxMode mode, bool log, const void* x,
                     void* y, Scaling scaling);
void softmax_backward(cudnnHandle_t handle, const ChunkConv& shape, SoftmaxMode mode, bool log, const void* y,
                      const void* dy, void* dx, Scaling scaling);
void pool_forward(cudnnHandle_t handle, const ChunkConv& shape, PoolMode mode, const void* x, void* y,
                  Scaling scaling);
void pool_backward(cudnnHandle_t handle, const ChunkConv& shape, PoolMode mode, const void* y, const void* dy,
                   const void* x, void* dx, Scaling scaling);
// out = alpha * a + beta * (b ? b : out); b (when given) is first copied into out on `stream`.
// float32 and float16 only: cuDNN documents cudnnAddTensor for float, half and double data, not
// bfloat16, so the cuda backend adds bfloat16 with its own kernel (layer_kernels.hpp).
void add_tensor(cudnnHandle_t handle, cudaStream_t stream, const ChunkConv& a_shape, const ChunkConv& out_shape,
                double alpha, const void* a, double beta, const void* b, void* out);

}  // namespace ooc::cudnn_layers
