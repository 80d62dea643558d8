// The room for layout copies (plan/layout_copies.hpp) in cuda plans: channels-last 3-D
// convolutions reserve channels-first copies of every chunk's x, w and y (the cuda backend stages
// chunks cuDNN has no NDHWC kernel for there), half channels-first forward and backward data the
// same for cuDNN's own NHWC copies; the host backend and float32 channels-first reserve nothing.
// The room sits inside the workspace and inside the budget, at budgets that split every way.
#include <gtest/gtest.h>

#include "backward_plan_checks.hpp"
#include "plan/layout_copies.hpp"
#include "plan/planner.hpp"
#include "plan_checks.hpp"
#include "test_util.hpp"

namespace {

using ooc::ConvProblem;
using ooc::DType;
using ooc::Layout;
using ooc::Operation;
using ooc::Plan;
using ooc_test::backward_spec;

constexpr size_t kAllowance = 4096;

ConvProblem problem(Operation op, Layout layout, DType dtype) {
  // Odd channel counts and uneven edges: the chunks a tight budget makes are what cuDNN refused.
  ConvProblem p = op == Operation::forward
                      ? ooc_test::ConvSpec{{2, 5, 9, 7, 6}, {3, 5, 3, 3, 2}, {1}, {1, 1, 0}}.problem()
                      : backward_spec(op, {2, 5, 9, 7, 6}, {3, 5, 3, 3, 2}, {1}, {1, 1, 0}).problem();
  p.layout = layout;
  p.dtype = dtype;
  return p;
}

Plan plan_at(const ConvProblem& p, size_t budget, const char* backend) {
  ooc::PlannerConfig cfg = ooc_test::config(budget, kAllowance);
  cfg.backend = backend;
  return p.op == Operation::forward ? ooc::plan_conv_forward_for(p, cfg) : ooc::plan_conv_backward_for(p, cfg);
}

// The copies of the plan's largest chunk: its slots, in elements.
size_t largest_copies(const Plan& plan) {
  const size_t es = ooc::dtype_size(plan.problem.dtype);
  return ooc::layout_copy_bytes(static_cast<int64_t>(plan.x_slot_bytes / es), static_cast<int64_t>(plan.w_slot_bytes / es),
                                static_cast<int64_t>(plan.y_slot_bytes / es), plan.problem.dtype);
}

class LayoutCopiesPlans : public ::testing::TestWithParam<Operation> {};

TEST_P(LayoutCopiesPlans, Channels3dLastReserveTheirCopiesOnCudaOnly) {
  const ConvProblem p = problem(GetParam(), Layout::channels_last, DType::float32);
  const size_t whole = static_cast<size_t>(p.x_elements() + p.w_elements() + p.y_elements()) * 4;
  for (size_t budget : {whole / 2, whole, 4 * whole}) {
    const Plan cuda = plan_at(p, budget, "cuda");
    SCOPED_TRACE(cuda.describe());
    EXPECT_GE(cuda.workspace_bytes + 3 * 256, largest_copies(cuda)) << "room for the largest chunk's copies";
    EXPECT_LE(cuda.peak_device_bytes, budget);
    const Plan host = plan_at(p, budget, "host");
    EXPECT_LE(host.workspace_bytes, 2 * kAllowance) << "the host backend stages nothing";
  }
}

TEST_P(LayoutCopiesPlans, HalfChannelsFirstReservesCudnnsCopiesFloat32DoesNot) {
  const Operation op = GetParam();
  const ConvProblem half = problem(op, Layout::channels_first, DType::bfloat16);
  const size_t budget = static_cast<size_t>(half.x_elements() + half.w_elements() + half.y_elements()) * 2;
  const Plan plan = plan_at(half, budget, "cuda");
  SCOPED_TRACE(plan.describe());
  EXPECT_LE(plan.peak_device_bytes, budget);
  if (op == Operation::backward_filter) return;  // its reserve grows with x instead (filter_workspace_per_x_byte)
  EXPECT_GE(plan.workspace_bytes + 3 * 256, largest_copies(plan));
  EXPECT_EQ(ooc::layout_copies(true, op, Layout::channels_first, 3, DType::float32), ooc::LayoutCopies::none);
}

INSTANTIATE_TEST_SUITE_P(Operations, LayoutCopiesPlans,
                         ::testing::Values(Operation::forward, Operation::backward_data, Operation::backward_filter),
                         [](const auto& info) { return std::string(ooc::operation_name(info.param)); });

}  // namespace
