// cuDNN calls of the layers (layers.hpp) on dense device chunks, issued on `stream`; every status
// checked (cudnn_error). Used by the cuda backend's overrides.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/backend.hpp"

namespace ooc::cudnn_layers {

void activation_forward(cudnnHandle_t handle, const ChunkConv& shape, ActivationMode mode, double coef,
                        const float* x, float* y);
void activation_backward(cudnnHandle_t handle, const ChunkConv& shape, ActivationMode mode, double coef,
                         const float* y, const float* dy, const float* x, float* dx);
void softmax_forward(cudnnHandle_t handle, const ChunkConv& shape, SoftmaxMode mode, bool log, const float* x,
                     float* y);
void softmax_backward(cudnnHandle_t handle, const ChunkConv& shape, SoftmaxMode mode, bool log, const float* y,
                      const float* dy, float* dx);
void pool_forward(cudnnHandle_t handle, const ChunkConv& shape, PoolMode mode, const float* x, float* y);
void pool_backward(cudnnHandle_t handle, const ChunkConv& shape, PoolMode mode, const float* y, const float* dy,
                   const float* x, float* dx);
// out = alpha * a + beta * (b ? b : out); b (when given) is first copied into out on `stream`.
void add_tensor(cudnnHandle_t handle, cudaStream_t stream, const ChunkConv& a_shape, const ChunkConv& out_shape,
                double alpha, const float* a, double beta, const float* b, float* out);

}  // namespace ooc::cudnn_layers
