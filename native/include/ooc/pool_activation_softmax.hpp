// Out-of-core element-wise and per-position layers over host tensors: activation, softmax and
// add-tensor (cuDNN's ActivationForward/Backward, SoftmaxForward/Backward, AddTensor). Shapes are
// [n, c, spatial...] (rank 3 to 5; callers flatten anything else), C-contiguous, of one dtype
// (float32, float16 or bfloat16; half precision is computed in float32 or double). Each
// runs through the same planner vocabulary (Plan, Chunk) and pipeline as the convolution.
// Each blends its result r into its output as cuDNN does, out = alpha * r + beta * out (alpha,
// beta: the trailing arguments, or the pooling problem's); beta == 0 never reads the output, and
// beta != 0 loads each chunk's output once before the chunk computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ooc/ooc.hpp"

namespace ooc {

PoolMode pool_mode_from_name(const std::string& name);

// x: [n, c, in...] (rank 3 to 5); kernel, stride, padding: one entry per spatial dim (or one for
// all). Checks as torch does (padding at most half the kernel; the kernel fits the padded input).
// The problem's alpha and beta (1 and 0 as made) blend pool_forward's y and pool_backward's dx;
// dtype: x's, y's and dx's (the plans count its bytes per element).
ConvProblem pool_problem(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
                         const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                         DType dtype = DType::float32);
// Splits n, c and every spatial dim (with the window halo). Pooling's padding (-inf for max, not
// counted for avg_exclude_pad) is not explicit zeros and cuDNN's legacy padding is symmetric, so
// every chunk keeps cuDNN's padding and computes a few rows more than its tile, aligned to it;
// only the tile is written back (layer_planner.cpp, pool_rows).
Plan plan_pool_forward(const ConvProblem& problem, const Options& options);
// x and y of problem.dtype.
void pool_forward(const ConvProblem& problem, PoolMode mode, const void* x, void* y, const Options& options,
                  Plan* used = nullptr, RunStats* stats = nullptr);

// dx = the gradient of pool_forward for dy, from y, dy and x (cuDNN PoolingBackward). Padded dims
// stay whole here (the forward's border treatment is not carried over yet). dx is tiled
// disjointly; along split dims each chunk computes a wider region from the dy rows that reach its
// tile (backward data's arithmetic, conv_geometry.hpp) and writes back only the tile.
ConvProblem pool_backward_problem(const ConvProblem& forward);  // the same geometry, op pool_backward
Plan plan_pool_backward(const ConvProblem& problem, const Options& options);
void pool_backward(const ConvProblem& problem, PoolMode mode, const void* y, const void* dy, const void* x,
                   void* dx, const Options& options, Plan* used = nullptr, RunStats* stats = nullptr);

// Parses "relu", ... / "channel", "instance"; invalid_argument listing the valid names otherwise.
ActivationMode activation_mode_from_name(const std::string& name);
SoftmaxMode softmax_mode_from_name(const std::string& name);

// The problem each layer plans for (problem.op says which; k == c, out == in).
ConvProblem layer_problem(Operation op, const std::vector<int64_t>& shape);

// Every layer here takes every dtype (float32, float16, bfloat16: computed in float32 or double);
// on the GPU, half-precision activations for the modes cuDNN has, the others float32 only.
Plan plan_activation_forward(const std::vector<int64_t>& shape, const Options& options,
                             DType dtype = DType::float32);
// mode: the activation's; modes whose gradient follows from y alone (ActivationTraits::gradient_from_y:
// relu, sigmoid, tanh) do not stream x.
Plan plan_activation_backward(const std::vector<int64_t>& shape, ActivationMode mode, const Options& options,
                              DType dtype = DType::float32);
Plan plan_softmax_forward(const std::vector<int64_t>& shape, SoftmaxMode mode, const Options& options,
                          DType dtype = DType::float32);
Plan plan_softmax_backward(const std::vector<int64_t>& shape, SoftmaxMode mode, const Options& options,
                           DType dtype = DType::float32);
// a broadcasts over c: each dim of a is 1 or equals c's. in_place: out is c (c is then read as out).
Plan plan_add_tensor(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& c_shape, bool in_place,
                     const Options& options, DType dtype = DType::float32);

// y = f(x); y may be x (in place). coef: clipped_relu's ceiling, elu's alpha, swish's beta.
void activation_forward(const std::vector<int64_t>& shape, ActivationMode mode, double coef, const void* x,
                        void* y, const Options& options, Plan* used = nullptr, RunStats* stats = nullptr,
                        double alpha = 1.0, double beta = 0.0, DType dtype = DType::float32);
// dx = f'(x) * dy (from y, dy and x); dx may be dy.
void activation_backward(const std::vector<int64_t>& shape, ActivationMode mode, double coef, const void* y,
                         const void* dy, const void* x, void* dx, const Options& options, Plan* used = nullptr,
                         RunStats* stats = nullptr, double alpha = 1.0, double beta = 0.0,
                         DType dtype = DType::float32);
void softmax_forward(const std::vector<int64_t>& shape, SoftmaxMode mode, bool log, const void* x, void* y,
                     const Options& options, Plan* used = nullptr, RunStats* stats = nullptr, double alpha = 1.0,
                     double beta = 0.0, DType dtype = DType::float32);
void softmax_backward(const std::vector<int64_t>& shape, SoftmaxMode mode, bool log, const void* y, const void* dy,
                      void* dx, const Options& options, Plan* used = nullptr, RunStats* stats = nullptr,
                      double alpha = 1.0, double beta = 0.0, DType dtype = DType::float32);
// out = alpha * a + beta * c (a broadcast); out may be c (in place). a, c and out of `dtype`.
void add_tensor(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& c_shape, double alpha,
                const void* a, double beta, const void* c, void* out, const Options& options,
                Plan* used = nullptr, RunStats* stats = nullptr, DType dtype = DType::float32);

}  // namespace ooc
