// Runs a forward-convolution plan on a backend: for each chunk, gather its x and w regions into
// staging buffers (host workers), copy them in on the H2D queue, convolve on the compute queue,
// copy y out on the D2H queue into a staging buffer and scatter it into the caller's y. Events
// chain the queues so that chunk i+1 loads while chunk i computes and chunk i-1 writes back.
#pragma once

#include "backend/backend.hpp"
#include "exec/thread_pool.hpp"
#include "ooc/ooc.hpp"

namespace ooc {

RunStats run_conv_forward(const Plan& plan, Backend& backend, const float* x, const float* w, const float* bias,
                          float* y, ThreadPool& pool);

}  // namespace ooc
