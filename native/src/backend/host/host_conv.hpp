// Reference convolution and gradients on the CPU (direct loops, float accumulation per output row):
// the host backend's compute, parallel over the worker pool. What each computes: backend.hpp.
// Tensors of the chunk's dtype (float32, float16, bfloat16), read and computed in float; the output
// of ChunkConv::out_dtype.
#pragma once

#include "backend/backend.hpp"
#include "util/thread_pool.hpp"

namespace ooc {

// y = alpha * conv(x, w) + beta * y, then y += bias[k] if bias; beta == 0 never reads y.
void host_conv_forward(const ChunkConv& s, const void* x, const void* w, const void* bias, void* y, double alpha,
                       double beta, ThreadPool& pool);
void host_conv_backward_data(const ChunkConv& s, const void* dy, const void* w, void* dx, double alpha, double beta,
                             ThreadPool& pool);
void host_conv_backward_filter(const ChunkConv& s, const void* x, const void* dy, void* dw, double alpha,
                               double beta, ThreadPool& pool);
void host_conv_backward_bias(const ChunkConv& s, const void* dy, void* db, double alpha, double beta,
                             ThreadPool& pool);

}  // namespace ooc
