// Reference forward convolution on the CPU (direct loops, float accumulation per chunk): the host
// backend's compute, and the ground truth the GPU is compared with in the C++ tests.
#pragma once

#include "backend/backend.hpp"
#include "exec/thread_pool.hpp"

namespace ooc {

// y = alpha * conv(x, w) + beta * y, then y += bias[k] if bias; beta == 0 never reads y.
void host_conv_forward(const ChunkConv& s, const float* x, const float* w, const float* bias, float* y, double alpha,
                       double beta, ThreadPool& pool);

}  // namespace ooc
