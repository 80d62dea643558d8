// layers.hpp's entry points: GEMM and batch normalization, planned and run like the convolutions.
#include "ooc/layers.hpp"

#include <cmath>
#include <memory>

#include "api/host_channel_vectors.hpp"
#include "api/run_operation.hpp"
#include "exec/layer_pipeline.hpp"
#include "util/thread_pool.hpp"
#include "plan/layer_planners.hpp"

namespace ooc {
namespace {

void check_op(const ConvProblem& p, bool ok, const char* what) {
  if (!ok)
    throw invalid_argument(std::string(what) + ": the problem describes " + operation_name(p.op) +
                           " (make it with the matching factory of layers.hpp)");
}

bool is_batchnorm(Operation op) {
  return op == Operation::batchnorm_forward_training || op == Operation::batchnorm_forward_inference ||
         op == Operation::batchnorm_backward;
}

void check_eps(double eps) {
  if (!(eps > 0) || !std::isfinite(eps)) throw invalid_argument("eps must be positive, got " + std::to_string(eps));
}

OperationCall matmul_call(const ConvProblem& p, std::vector<const void*> tensors,
                          std::function<RunStats(const Plan&, Backend&)> run) {
  // Each reduction over K writes its own tile of C.
  return spreading({PlanKey("matmul").add(p), [&p](const PlannerConfig& c) { return plan_matmul_for(p, c); },
                    std::move(tensors), std::move(run)});
}

OperationCall batchnorm_call(const ConvProblem& p, const BatchnormTensors& t) {
  OperationCall call{PlanKey("batchnorm").add(p), [&p](const PlannerConfig& c) { return plan_batchnorm_for(p, c); },
                     // The streamed tensors; the per-channel ones are read and written by the host.
                     {t.x, t.dy, t.out},
                     [&t](const Plan& plan, Backend& backend) {
                       return run_batchnorm(plan, backend, t, ThreadPool::shared());
                     }};
  // Over several devices: every device's statistics pass, one float64 merge, every device's apply
  // pass (each chunk is a reduction group of its own, so shares are runs of whole chunks).
  call.spreads = true;
  call.passes = [&t](const Plan& whole) {
    auto bn = std::make_shared<BatchnormPasses>(whole, t);
    OperationCall::Passes passes;
    if (bn->has_statistics()) {
      passes.first = [bn](const Plan& share, Backend& b) { return bn->statistics(share, b, ThreadPool::shared()); };
      passes.between = [bn] { bn->merge(); };
    }
    if (bn->applies())
      passes.second = [bn](const Plan& share, Backend& b) { return bn->apply(share, b, ThreadPool::shared()); };
    return passes;
  };
  return call;
}

}  // namespace

Plan plan_matmul(const ConvProblem& problem, const Options& options) {
  check_op(problem, problem.op == Operation::matmul, "plan_matmul");
  return plan_operation(matmul_call(problem, {}, {}), options);
}

void matmul(const ConvProblem& problem, bool trans_a, bool trans_b, const void* a, const void* b, const void* bias,
            void* c, const Options& options, Plan* used, RunStats* stats) {
  const int64_t M = problem.n, K = problem.c, N = problem.k;
  matmul(problem, trans_a, trans_b, a, trans_a ? M : K, b, trans_b ? K : N, bias, c, N, options, used, stats);
}

void matmul(const ConvProblem& problem, bool trans_a, bool trans_b, const void* a, int64_t lda, const void* b,
            int64_t ldb, const void* bias, void* c, int64_t ldc, const Options& options, Plan* used,
            RunStats* stats) {
  check_op(problem, problem.op == Operation::matmul, "matmul");
  require_data({a, b, c, problem.has_bias ? bias : a}, "matmul");
  const int64_t M = problem.n, K = problem.c, N = problem.k;
  auto check_ld = [](const char* name, int64_t ld, int64_t row) {
    if (ld < row)
      throw invalid_argument(std::string(name) + " must be at least the stored row length " + std::to_string(row) +
                             ", got " + std::to_string(ld));
  };
  check_ld("lda", lda, trans_a ? M : K);
  check_ld("ldb", ldb, trans_b ? K : N);
  check_ld("ldc", ldc, N);
  run_operation(matmul_call(problem, {a, b, bias, c},
                            [&](const Plan& plan, Backend& backend) {
                              return run_matmul(plan, backend, trans_a, trans_b, a, lda, b, ldb, bias, c, ldc,
                                                ThreadPool::shared());
                            }),
                options, used, stats);
}

Plan plan_batchnorm(const ConvProblem& problem, const Options& options) {
  check_op(problem, is_batchnorm(problem.op), "plan_batchnorm");
  return plan_operation(batchnorm_call(problem, BatchnormTensors{}), options);
}

void batchnorm_forward_training(const ConvProblem& problem, const void* x, const float* scale, const float* bias,
                                double eps, double momentum, float* running_mean, float* running_var, void* y,
                                float* saved_mean, float* saved_invstd, const Options& options, Plan* used,
                                RunStats* stats) {
  check_op(problem, problem.op == Operation::batchnorm_forward_training, "batchnorm_forward_training");
  check_eps(eps);
  if (!x || !scale || !bias || !saved_mean || !saved_invstd || (!running_mean != !running_var))
    throw invalid_argument("batchnorm_forward_training: null data pointer (running_mean and running_var go together)");
  if (problem.n * problem.in[0] * problem.in[1] * problem.in[2] <= 1)
    throw invalid_argument("Expected more than 1 value per channel when training, got input size " +
                           std::to_string(problem.n) + "x" + std::to_string(problem.c));
  api::HostChannelVectors vectors(problem.c);
  BatchnormTensors t;
  t.x = x;
  t.scale = vectors.input(scale);
  t.bias = vectors.input(bias);
  t.out = y;
  t.out_mean = vectors.output(saved_mean);
  t.out_invstd = vectors.output(saved_invstd);
  t.running_mean = vectors.in_out(running_mean);
  t.running_var = vectors.in_out(running_var);
  t.eps = eps;
  t.momentum = momentum;
  run_operation(batchnorm_call(problem, t), options, used, stats);
  vectors.write_back();
}

void batchnorm_forward_inference(const ConvProblem& problem, const void* x, const float* scale, const float* bias,
                                 const float* mean, const float* var, double eps, void* y, const Options& options,
                                 Plan* used, RunStats* stats) {
  check_op(problem, problem.op == Operation::batchnorm_forward_inference, "batchnorm_forward_inference");
  check_eps(eps);
  require_data({x, scale, bias, mean, var, y}, "batchnorm_forward_inference");
  api::HostChannelVectors vectors(problem.c);
  BatchnormTensors t;
  t.x = x;
  t.scale = vectors.input(scale);
  t.bias = vectors.input(bias);
  t.mean = vectors.input(mean);
  t.var = vectors.input(var);
  t.out = y;
  t.eps = eps;
  run_operation(batchnorm_call(problem, t), options, used, stats);
}

void batchnorm_backward(const ConvProblem& problem, const void* x, const void* dy, const float* scale,
                        const float* saved_mean, const float* saved_invstd, void* dx, float* dscale, float* dbias,
                        const Options& options, Plan* used, RunStats* stats) {
  check_op(problem, problem.op == Operation::batchnorm_backward, "batchnorm_backward");
  require_data({x, dy, scale, saved_mean, saved_invstd, dx, dscale, dbias}, "batchnorm_backward");
  api::HostChannelVectors vectors(problem.c);
  BatchnormTensors t;
  t.x = x;
  t.dy = dy;
  t.scale = vectors.input(scale);
  t.saved_mean = vectors.input(saved_mean);
  t.saved_invstd = vectors.input(saved_invstd);
  t.out = dx;
  t.dscale = vectors.output(dscale);
  t.dbias = vectors.output(dbias);
  run_operation(batchnorm_call(problem, t), options, used, stats);
  vectors.write_back();
}

}  // namespace ooc
