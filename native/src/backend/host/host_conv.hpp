// Reference convolution and gradients on the CPU (direct loops, float accumulation per output row):
// the host backend's compute, parallel over the worker pool. What each computes: backend.hpp.
#pragma once

#include "backend/backend.hpp"
#include "util/thread_pool.hpp"

namespace ooc {

// y = alpha * conv(x, w) + beta * y, then y += bias[k] if bias; beta == 0 never reads y.
void host_conv_forward(const ChunkConv& s, const float* x, const float* w, const float* bias, float* y, double alpha,
                       double beta, ThreadPool& pool);
void host_conv_backward_data(const ChunkConv& s, const float* dy, const float* w, float* dx, double alpha, double beta,
                             ThreadPool& pool);
void host_conv_backward_filter(const ChunkConv& s, const float* x, const float* dy, float* dw, double alpha,
                               double beta, ThreadPool& pool);
void host_conv_backward_bias(const ChunkConv& s, const float* dy, float* db, double alpha, double beta,
                             ThreadPool& pool);

}  // namespace ooc
