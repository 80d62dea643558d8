// Reference loops of the layers in pool_activation_softmax.hpp (pooling, activation, softmax,
// add-tensor) over dense host chunks, in double precision where they reduce: the host backend's
// compute, parallel over the worker pool. What each computes and how it blends into its output:
// backend.hpp.
#pragma once

#include "backend/backend.hpp"
#include "util/thread_pool.hpp"

namespace ooc {

// Every layer reads and writes the chunk's dtype (float32, float16, bfloat16), computing in double
// (an add in double, rounded to float, then to the dtype).
void host_activation_forward(const ChunkConv& shape, ActivationMode mode, double coef, const void* x, void* y,
                             double alpha, double beta, ThreadPool& pool);
void host_activation_backward(const ChunkConv& shape, ActivationMode mode, double coef, const void* y,
                              const void* dy, const void* x, void* dx, double alpha, double beta, ThreadPool& pool);
void host_softmax_forward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* x, void* y,
                          double alpha, double beta, ThreadPool& pool);
void host_softmax_backward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* y, const void* dy,
                           void* dx, double alpha, double beta, ThreadPool& pool);
void host_pool_forward(const ChunkConv& shape, PoolMode mode, const void* x, void* y, double alpha, double beta,
                       ThreadPool& pool);
void host_pool_backward(const ChunkConv& shape, PoolMode mode, const void* y, const void* dy, const void* x,
                        void* dx, double alpha, double beta, ThreadPool& pool);
void host_add_tensor(const ChunkConv& a_shape, const ChunkConv& out_shape, double alpha, const void* a,
                     double beta, const void* b, void* out, ThreadPool& pool);

}  // namespace ooc
