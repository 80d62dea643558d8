// Runs pool_activation_softmax.hpp's plans through the chunk pipeline: what each layer's chunks
// stream and compute (plans: plan/layer_planner.hpp). Every layer blends into its output as cuDNN
// does, out = alpha * r + beta * out; beta != 0 loads each chunk's output before it computes.
#pragma once

#include <array>
#include <vector>

#include "backend/backend.hpp"
#include "util/thread_pool.hpp"
#include "ooc/types.hpp"

namespace ooc {

RunStats run_pool_forward(const Plan& plan, Backend& backend, PoolMode mode, const void* x, void* y,
                          ThreadPool& pool);
RunStats run_pool_backward(const Plan& plan, Backend& backend, PoolMode mode, const void* y, const void* dy,
                           const void* x, void* dx, ThreadPool& pool);
RunStats run_activation_forward(const Plan& plan, Backend& backend, ActivationMode mode, double coef, const void* x,
                                void* y, ThreadPool& pool);
RunStats run_activation_backward(const Plan& plan, Backend& backend, ActivationMode mode, double coef, const void* y,
                                 const void* dy, const void* x, void* dx, ThreadPool& pool);
RunStats run_softmax_forward(const Plan& plan, Backend& backend, SoftmaxMode mode, bool log, const void* x, void* y,
                             ThreadPool& pool);
RunStats run_softmax_backward(const Plan& plan, Backend& backend, SoftmaxMode mode, bool log, const void* y,
                              const void* dy, void* dx, ThreadPool& pool);
// a broadcasts over c along the dims where broadcast_full is false (a has size 1 there); out may be c.
RunStats run_add_tensor(const Plan& plan, Backend& backend, const std::vector<int64_t>& a_shape,
                        const std::array<bool, 5>& broadcast_full, const void* a, const void* c, void* out,
                        ThreadPool& pool);

}  // namespace ooc
