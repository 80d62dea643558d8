// Runs the fused functions' plans (fused.hpp) through the chunk pipeline: each starts from the spec
// of the operation it extends and adds what the chunk does on the device before its output leaves.
#pragma once

#include "backend/backend.hpp"
#include "util/thread_pool.hpp"
#include "ooc/types.hpp"

namespace ooc {

RunStats run_conv_bias_activation_forward(const Plan& plan, Backend& backend, const FusedActivation& activation,
                                          const void* x, const void* w, const void* z, const void* bias, void* y,
                                          ThreadPool& pool);
// pool: the pooling of y (pool_problem), out its result.
RunStats run_conv_bias_activation_pooling_forward(const Plan& plan, Backend& backend,
                                                  const FusedActivation& activation, const ConvProblem& pool,
                                                  PoolMode mode, const void* x, const void* w, const void* z,
                                                  const void* bias, void* out, ThreadPool& pool_threads);
// The plan: the deconvolution's backward-data plan (x plays dy, y plays dx).
RunStats run_deconv_bias_activation_forward(const Plan& plan, Backend& backend, const FusedActivation& activation,
                                            const void* x, const void* w, const void* z, const void* bias,
                                            void* y, ThreadPool& pool);
RunStats run_conv_backward_data_filter_bias(const Plan& plan, Backend& backend, const void* x, const void* dy,
                                            const void* w, void* dx, void* dw, void* db, ThreadPool& pool);
// pool: the pooling folded in (dq, q pooled-shaped; y, pre y-shaped).
RunStats run_pooling_activation_conv_backward_data_filter_bias(
    const Plan& plan, Backend& backend, const FusedActivation& activation, const ConvProblem& pool, PoolMode mode,
    const void* x, const void* dq, const void* w, const void* q, const void* y, const void* pre, void* dx,
    void* dw, void* db, ThreadPool& threads);
// pre: the activation's input, or null where y alone gives its gradient.
RunStats run_activation_conv_backward_data_filter_bias(const Plan& plan, Backend& backend,
                                                       const FusedActivation& activation, const void* x,
                                                       const void* dy, const void* w, const void* y,
                                                       const void* pre, void* dx, void* dw, void* db,
                                                       ThreadPool& pool);

}  // namespace ooc
