// Runs a convolution plan, or a plan of one of its gradients, through the chunk pipeline
// (exec/chunk_pipeline.hpp): each function says which regions its chunks move and what they compute.
#pragma once

#include "backend/backend.hpp"
#include "exec/chunk_pipeline.hpp"
#include "util/thread_pool.hpp"
#include "ooc/types.hpp"

namespace ooc {

// The spec run_conv_forward streams through run_chunks (fused forwards build on it).
OperationSpec conv_forward_spec(const Plan& plan, Backend& backend, const void* x, const void* w, const void* bias,
                                void* y);
RunStats run_conv_forward(const Plan& plan, Backend& backend, const void* x, const void* w, const void* bias,
                          void* y, ThreadPool& pool);
// The spec run_conv_backward_data streams (the fused transposed convolution builds on it).
OperationSpec conv_backward_data_spec(const Plan& plan, Backend& backend, const void* dy, const void* w, void* dx);
RunStats run_conv_backward_data(const Plan& plan, Backend& backend, const void* dy, const void* w, void* dx,
                                ThreadPool& pool);
RunStats run_conv_backward_filter(const Plan& plan, Backend& backend, const void* x, const void* dy, void* dw,
                                  ThreadPool& pool);
RunStats run_conv_backward_bias(const Plan& plan, Backend& backend, const void* dy, void* db, ThreadPool& pool);

}  // namespace ooc
