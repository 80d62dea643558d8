#include "plan/layer_problems.hpp"

#include <sstream>

#include "ooc/errors.hpp"
#include "ooc/problem.hpp"
#include "plan/checked_size.hpp"
#include "plan/shape_format.hpp"

namespace ooc {

namespace {
std::string by(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? "x" : "") << shape[i];
  return s.str();
}
}  // namespace

ConvProblem matmul_problem(const std::vector<int64_t>& a_shape, const std::vector<int64_t>& b_shape, double alpha,
                           double beta, bool has_bias, DType dtype) {
  if (a_shape.size() != 2) throw invalid_argument("mat1 must be a matrix, got " + std::to_string(a_shape.size()) + "-D");
  if (b_shape.size() != 2) throw invalid_argument("mat2 must be a matrix, got " + std::to_string(b_shape.size()) + "-D");
  if (a_shape[1] != b_shape[0])
    throw invalid_argument("mat1 and mat2 shapes cannot be multiplied (" + by(a_shape) + " and " + by(b_shape) + ")");
  for (int64_t v : {a_shape[0], a_shape[1], b_shape[1]})
    if (v <= 0) throw invalid_argument("matmul: every dimension must be positive, got mat1 " + by(a_shape) + " and mat2 " + by(b_shape));
  checked::tensor_elements(a_shape, dtype_size(dtype), "mat1");
  checked::tensor_elements(b_shape, dtype_size(dtype), "mat2");
  // Its float32 size too: a half product's split K reduction runs through a float32 accumulator.
  checked::tensor_elements({a_shape[0], b_shape[1]}, dtype_size(DType::float32), "the product of mat1 and mat2");
  ConvProblem p;
  p.op = Operation::matmul;
  p.spatial_dims = 1;
  p.n = a_shape[0];
  p.c = a_shape[1];
  p.k = b_shape[1];
  p.alpha = alpha;
  p.beta = beta;
  p.has_bias = has_bias;
  p.dtype = dtype;
  return p;
}

ConvProblem batchnorm_problem(Operation op, const std::vector<int64_t>& x_shape, DType dtype) {
  if (op != Operation::batchnorm_forward_training && op != Operation::batchnorm_forward_inference &&
      op != Operation::batchnorm_backward)
    throw invalid_argument(std::string("batchnorm_problem: ") + operation_name(op) + " is not a batch-norm operation");
  if (x_shape.size() < 2 || x_shape.size() > 5)
    throw invalid_argument("x must have 2 to 5 dimensions (N, C, spatial...), got " + std::to_string(x_shape.size()));
  for (int64_t v : x_shape)
    if (v <= 0) throw invalid_argument("x must have no empty dimension, got shape " + format_shape(x_shape));
  checked::tensor_elements(x_shape, dtype_size(DType::float32), "x");
  ConvProblem p;
  p.op = op;
  p.dtype = dtype;
  p.spatial_dims = x_shape.size() == 2 ? 1 : static_cast<int>(x_shape.size()) - 2;
  p.n = x_shape[0];
  p.c = p.k = x_shape[1];
  for (size_t d = 2; d < x_shape.size(); ++d) p.in[d - 2] = p.out[d - 2] = x_shape[d];
  return p;
}

std::string describe_layer(const ConvProblem& p) {
  std::ostringstream s;
  if (p.op == Operation::matmul) {
    s << "matmul " << dtype_name(p.dtype) << ": [" << p.n << "x" << p.c << "] @ [" << p.c << "x" << p.k << "] -> [" << p.n << "x" << p.k
      << "]";
    if (p.alpha != 1.0 || p.beta != 0.0) s << " alpha=" << p.alpha << " beta=" << p.beta;
    if (p.has_bias) s << " +bias";
    return s.str();
  }
  s << operation_name(p.op) << " " << dtype_name(p.dtype) << ": x" << format_shape(p.x_shape());
  return s.str();
}

}  // namespace ooc
