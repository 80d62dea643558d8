// describe() of layers.hpp's problems (GEMM, batch normalization), used by ConvProblem::describe.
#pragma once

#include <string>

#include "ooc/problem.hpp"

namespace ooc {
std::string describe_layer(const ConvProblem& p);
}  // namespace ooc
