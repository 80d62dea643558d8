// Every operation runs through one path (api/run_operation): its second identical call is
// answered from the plan cache, without running the planner, and the pinned rule applies to every
// operation alike (a call whose tensors are all device-accessible plans without staging cost).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend_fixtures.hpp"
#include "ooc/fused.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc.hpp"
#include "plan/plan_cache.hpp"

namespace {

constexpr size_t kBudget = 64 << 10;  // small enough that every call below runs in several chunks

struct CachedCall {
  std::string name;
  std::function<void(ooc::Plan*)> run;  // one call of the operation, receiving the plan it ran
};

std::vector<float> filled(size_t n, float v = 0.5f) { return std::vector<float>(n, v); }

std::vector<CachedCall> calls() {
  const ooc::Options o = ooc_test::host_options(kBudget);
  std::vector<CachedCall> c;
  const std::vector<int64_t> shape{4, 6, 20, 20};
  const size_t n = 4 * 6 * 20 * 20;
  c.push_back({"conv_forward", [o](ooc::Plan* used) {
                 const auto p = ooc::ConvProblem::forward({4, 6, 20, 20}, {8, 6, 3, 3}, {1}, {1}, {1}, 1, 1, 0, false);
                 auto x = filled(p.x_elements()), w = filled(p.w_elements()), y = filled(p.y_elements());
                 ooc::conv_forward(p, x.data(), w.data(), nullptr, y.data(), o, used);
               }});
  c.push_back({"pool_forward", [o, shape](ooc::Plan* used) {
                 const auto p = ooc::pool_problem(shape, {2}, {2}, {0});
                 auto x = filled(p.x_elements()), y = filled(p.y_elements());
                 ooc::pool_forward(p, ooc::PoolMode::max, x.data(), y.data(), o, used);
               }});
  c.push_back({"pool_backward", [o, shape](ooc::Plan* used) {
                 const auto p = ooc::pool_backward_problem(ooc::pool_problem(shape, {3}, {2}, {1}));
                 auto x = filled(p.x_elements()), dx = filled(p.x_elements());
                 auto y = filled(p.y_elements()), dy = filled(p.y_elements());
                 ooc::pool_backward(p, ooc::PoolMode::avg, y.data(), dy.data(), x.data(), dx.data(), o, used);
               }});
  c.push_back({"matmul", [o](ooc::Plan* used) {
                 const auto p = ooc::matmul_problem({96, 80}, {80, 72}, 1.0, 0.0, true);
                 auto a = filled(96 * 80), b = filled(80 * 72), bias = filled(72), out = filled(96 * 72);
                 ooc::matmul(p, false, false, a.data(), b.data(), bias.data(), out.data(), o, used);
               }});
  c.push_back({"batchnorm_forward_training", [o, shape, n](ooc::Plan* used) {
                 const auto p = ooc::batchnorm_problem(ooc::Operation::batchnorm_forward_training, shape);
                 auto x = filled(n), y = filled(n), scale = filled(6), bias = filled(6), mean = filled(6),
                      invstd = filled(6);
                 ooc::batchnorm_forward_training(p, x.data(), scale.data(), bias.data(), 1e-5, 0.1, nullptr, nullptr,
                                                 y.data(), mean.data(), invstd.data(), o, used);
               }});
  c.push_back({"batchnorm_backward", [o, shape, n](ooc::Plan* used) {
                 const auto p = ooc::batchnorm_problem(ooc::Operation::batchnorm_backward, shape);
                 auto x = filled(n), dy = filled(n), dx = filled(n), scale = filled(6), mean = filled(6),
                      invstd = filled(6), dscale = filled(6), dbias = filled(6);
                 ooc::batchnorm_backward(p, x.data(), dy.data(), scale.data(), mean.data(), invstd.data(), dx.data(),
                                         dscale.data(), dbias.data(), o, used);
               }});
  c.push_back({"activation_backward", [o, shape, n](ooc::Plan* used) {
                 auto y = filled(n), dy = filled(n), x = filled(n), dx = filled(n);
                 ooc::activation_backward(shape, ooc::ActivationMode::tanh, 0.0, y.data(), dy.data(), x.data(),
                                          dx.data(), o, used);
               }});
  c.push_back({"softmax_forward", [o, shape, n](ooc::Plan* used) {
                 auto x = filled(n), y = filled(n);
                 ooc::softmax_forward(shape, ooc::SoftmaxMode::channel, true, x.data(), y.data(), o, used);
               }});
  c.push_back({"add_tensor", [o, shape, n](ooc::Plan* used) {
                 auto a = filled(6), out = filled(n);
                 ooc::add_tensor({1, 6, 1, 1}, shape, 1.0, a.data(), 1.0, out.data(), out.data(), o, used);
               }});
  c.push_back({"conv_bias_activation_forward", [o](ooc::Plan* used) {
                 const auto p = ooc::ConvProblem::forward({4, 6, 20, 20}, {8, 6, 3, 3}, {1}, {1}, {1}, 1, 1, 0, true);
                 auto x = filled(p.x_elements()), w = filled(p.w_elements()), y = filled(p.y_elements()),
                      bias = filled(8);
                 ooc::conv_bias_activation_forward(p, ooc::fused_activation_from_name("relu", 0.0), x.data(),
                                                   w.data(), nullptr, bias.data(), y.data(), o, used);
               }});
  return c;
}

class OperationPlanCache : public ::testing::TestWithParam<CachedCall> {
 protected:
  void SetUp() override { ooc::clear_plan_cache(); }
  void TearDown() override {
    ooc::testing::set_host_direct_access(false);
    ooc::clear_plan_cache();
  }
};

TEST_P(OperationPlanCache, TheSecondIdenticalCallDoesNotRunThePlanner) {
  ooc::Plan first, second;
  GetParam().run(&first);
  ASSERT_GT(first.num_chunks(), 1u) << "the budget should force a split";
  const size_t kept = ooc::plan_cache_size(), hits = ooc::plan_cache_hits();
  EXPECT_EQ(kept, 1u);
  GetParam().run(&second);
  EXPECT_EQ(ooc::plan_cache_size(), kept);      // nothing new was planned...
  EXPECT_EQ(ooc::plan_cache_hits(), hits + 1);  // ...the plan came from the cache
  EXPECT_EQ(second.describe(), first.describe());
}

TEST_P(OperationPlanCache, APinnedCallPlansWithoutStagingCost) {
  ooc::Plan pageable, pinned;
  GetParam().run(&pageable);
  ooc::testing::set_host_direct_access(true);  // every tensor of the call is now device-accessible
  GetParam().run(&pinned);
  EXPECT_EQ(ooc::plan_cache_size(), 2u);  // a plan of its own: the configuration differs
  EXPECT_FALSE(std::isfinite(pinned.machine.host_copy_bytes_per_s));
  EXPECT_TRUE(std::isfinite(pageable.machine.host_copy_bytes_per_s));
}

INSTANTIATE_TEST_SUITE_P(EveryOperation, OperationPlanCache, ::testing::ValuesIn(calls()),
                         [](const ::testing::TestParamInfo<CachedCall>& info) { return info.param.name; });

}  // namespace
