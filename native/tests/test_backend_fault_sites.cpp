// Every fault site of ooc::testing::inject_fault, on the host backend (so that CI, which has no
// GPU, runs the error paths): arming a site makes the public operation that issues it throw what
// the library behind it would, naming the backend operation, and the library stays usable: the
// same call, disarmed, then gives the result it gave before the fault. Sites count separately, and
// the host backend honours none of them unless set_host_fault_injection asks it to.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ooc/fused.hpp"
#include "ooc/layers.hpp"
#include "ooc/ooc.hpp"
#include "ooc/pool_activation_softmax.hpp"
#include "backend_fixtures.hpp"

namespace {

using ooc::Operation;
using ooc::Options;
using ooc::Plan;

const char* const kSites[] = {"copy",    "conv", "gemm", "batchnorm",  "activation",
                              "softmax", "pool", "add",  "device_copy"};

std::vector<float> random_vector(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = dist(rng);
  return v;
}

// The smallest memory limit `plan` accepts on the host backend: the most chunks, so the most calls
// of every backend operation, and a fault that fires mid-pipeline.
size_t smallest_limit(const std::function<Plan(const Options&)>& plan) {
  try {
    plan(ooc_test::host_options(1));
  } catch (const ooc::out_of_budget& e) {
    return e.needed_bytes();
  }
  ADD_FAILURE() << "a 1-byte budget did not throw out_of_budget";
  return 1;
}

// One public operation under the smallest budget, returning its output; `used` gets the plan that ran.
using Run = std::function<std::vector<float>(const Options&, Plan* used)>;

struct SiteCase {
  const char* site;
  const char* operation;  // the backend operation the message names
  const char* thrown;     // "cuda_error" or "cudnn_error": what the real failure raises
  std::function<Plan(const Options&)> plan;
  Run run;
};

// What `f` threw: "cuda_error: <message>", "cudnn_error: <message>", "other: ..." or "nothing".
std::string thrown_by(const std::function<void()>& f) {
  try {
    f();
  } catch (const ooc::cuda_error& e) {
    return std::string("cuda_error: ") + e.what();
  } catch (const ooc::cudnn_error& e) {
    return std::string("cudnn_error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "nothing";
}

const ooc::ConvProblem kConv = ooc::ConvProblem::forward({2, 3, 12, 12}, {4, 3, 3, 3}, {1}, {1}, {1}, 1, 1.0, 0.0, true);
const std::vector<int64_t> kLayerShape{2, 3, 8, 8};

std::vector<float> run_conv(const Options& o, Plan* used) {
  const auto x = random_vector(kConv.x_elements(), 1), w = random_vector(kConv.w_elements(), 2);
  const auto b = random_vector(kConv.k, 3);
  std::vector<float> y(static_cast<size_t>(kConv.y_elements()), NAN);
  ooc::conv_forward(kConv, x.data(), w.data(), b.data(), y.data(), o, used);
  return y;
}

const ooc::ConvProblem kMatmul = ooc::matmul_problem({24, 16}, {16, 20}, 1.0, 0.0, true);

std::vector<float> run_matmul(const Options& o, Plan* used) {
  const auto a = random_vector(24 * 16, 4), b = random_vector(16 * 20, 5), bias = random_vector(20, 6);
  std::vector<float> c(24 * 20, NAN);
  ooc::matmul(kMatmul, false, false, a.data(), b.data(), bias.data(), c.data(), o, used);
  return c;
}

const ooc::ConvProblem kBatchnorm = ooc::batchnorm_problem(Operation::batchnorm_forward_training, {4, 3, 8, 8});

std::vector<float> run_batchnorm(const Options& o, Plan* used) {
  const auto x = random_vector(kBatchnorm.x_elements(), 7), scale = random_vector(3, 8), bias = random_vector(3, 9);
  std::vector<float> y(static_cast<size_t>(kBatchnorm.x_elements()), NAN), mean(3, NAN), invstd(3, NAN);
  ooc::batchnorm_forward_training(kBatchnorm, x.data(), scale.data(), bias.data(), 1e-5, 0.1, nullptr, nullptr,
                                  y.data(), mean.data(), invstd.data(), o, used);
  y.insert(y.end(), mean.begin(), mean.end());
  y.insert(y.end(), invstd.begin(), invstd.end());
  return y;
}

int64_t layer_elements() { return 2 * 3 * 8 * 8; }

std::vector<float> run_activation(const Options& o, Plan* used) {
  const auto x = random_vector(layer_elements(), 10);
  std::vector<float> y(x.size(), NAN);
  ooc::activation_forward(kLayerShape, ooc::ActivationMode::tanh, 0.0, x.data(), y.data(), o, used);
  return y;
}

std::vector<float> run_softmax(const Options& o, Plan* used) {
  const auto x = random_vector(layer_elements(), 11);
  std::vector<float> y(x.size(), NAN);
  ooc::softmax_forward(kLayerShape, ooc::SoftmaxMode::channel, false, x.data(), y.data(), o, used);
  return y;
}

const ooc::ConvProblem kPool = ooc::pool_problem({2, 3, 12, 12}, {3}, {2}, {1});

std::vector<float> run_pool(const Options& o, Plan* used) {
  const auto x = random_vector(kPool.x_elements(), 12);
  std::vector<float> y(static_cast<size_t>(kPool.y_elements()), NAN);
  ooc::pool_forward(kPool, ooc::PoolMode::max, x.data(), y.data(), o, used);
  return y;
}

const std::vector<int64_t> kAddShape{1, 3, 1, 1};  // a per-channel a, broadcast over c's n and space

std::vector<float> run_add(const Options& o, Plan* used) {
  const auto a = random_vector(3, 13), c = random_vector(layer_elements(), 14);
  std::vector<float> out(c.size(), NAN);
  ooc::add_tensor(kAddShape, kLayerShape, 2.0, a.data(), 0.5, c.data(), out.data(), o, used);
  return out;
}

// The fused pooling forward copies each pooled tile within the device (fused_pipeline.cpp).
const ooc::ConvProblem kPooledConv = ooc::pool_problem(kConv.y_shape(), {2}, {2}, {0});
const ooc::FusedActivation kRelu{false, ooc::ActivationMode::relu, 0.0};

std::vector<float> run_conv_pool(const Options& o, Plan* used) {
  const auto x = random_vector(kConv.x_elements(), 15), w = random_vector(kConv.w_elements(), 16);
  const auto b = random_vector(kConv.k, 17);
  std::vector<float> out(static_cast<size_t>(kPooledConv.y_elements()), NAN);
  ooc::conv_bias_activation_pooling_forward(kConv, kRelu, kPooledConv, ooc::PoolMode::max, x.data(), w.data(),
                                            nullptr, b.data(), out.data(), o, used);
  return out;
}

std::vector<SiteCase> site_cases() {
  const auto plan_conv = [](const Options& o) { return ooc::plan_conv_forward(kConv, o); };
  return {
      {"copy", "copy_h2d", "cuda_error", plan_conv, run_conv},
      {"conv", "conv_forward", "cudnn_error", plan_conv, run_conv},
      {"gemm", "gemm", "cuda_error", [](const Options& o) { return ooc::plan_matmul(kMatmul, o); }, run_matmul},
      {"batchnorm", "channel_moments", "cuda_error",
       [](const Options& o) { return ooc::plan_batchnorm(kBatchnorm, o); }, run_batchnorm},
      {"activation", "activation_forward", "cudnn_error",
       [](const Options& o) { return ooc::plan_activation_forward(kLayerShape, o); }, run_activation},
      {"softmax", "softmax_forward", "cudnn_error",
       [](const Options& o) { return ooc::plan_softmax_forward(kLayerShape, ooc::SoftmaxMode::channel, o); },
       run_softmax},
      {"pool", "pool_forward", "cudnn_error", [](const Options& o) { return ooc::plan_pool_forward(kPool, o); },
       run_pool},
      {"add", "add_tensor", "cudnn_error",
       [](const Options& o) { return ooc::plan_add_tensor(kAddShape, kLayerShape, false, o); }, run_add},
      {"device_copy", "copy_on_device", "cuda_error",
       [](const Options& o) { return ooc::plan_conv_bias_activation_pooling_forward(kConv, kPooledConv, o); },
       run_conv_pool},
  };
}

// Turns the host backend's fault injection on for each test, and leaves every site disarmed and
// the switch off after it, whatever the test did: the counters are process-wide.
class HostFaultSites : public ::testing::Test {
 protected:
  void SetUp() override { ooc::testing::set_host_fault_injection(true); }
  void TearDown() override {
    for (const char* site : kSites) ooc::testing::inject_fault(site, 0);
    ooc::testing::set_host_fault_injection(false);
    ooc::testing::set_host_direct_access(false);
  }
};

class HostFaultSite : public HostFaultSites, public ::testing::WithParamInterface<SiteCase> {};

TEST_P(HostFaultSite, FailsTheMatchingOperationAndLeavesTheLibraryUsable) {
  const SiteCase& c = GetParam();
  const Options o = ooc_test::host_options(smallest_limit(c.plan));
  Plan plan;
  const std::vector<float> before = c.run(o, &plan);
  // The second call of the operation, so the fault lands mid-pipeline with work in flight.
  ASSERT_GE(plan.num_chunks(), 2u) << plan.describe();
  ooc::testing::inject_fault(c.site, 2);
  const std::string thrown = thrown_by([&] { c.run(o, nullptr); });
  EXPECT_EQ(thrown.rfind(std::string(c.thrown) + ": injected fault: " + c.operation, 0), 0u) << thrown;
  // Fired once and disarmed: the same call runs again and gives the same result.
  EXPECT_EQ(c.run(o, nullptr), before);
}

INSTANTIATE_TEST_SUITE_P(Sites, HostFaultSite, ::testing::ValuesIn(site_cases()),
                         [](const ::testing::TestParamInfo<SiteCase>& info) { return std::string(info.param.site); });

TEST_F(HostFaultSites, SitesCountSeparately) {
  const std::vector<SiteCase> cases = site_cases();
  const SiteCase& pool = cases[6];
  const SiteCase& gemm = cases[2];
  ASSERT_EQ(std::string(pool.site), "pool");
  ASSERT_EQ(std::string(gemm.site), "gemm");
  const Options pool_options = ooc_test::host_options(smallest_limit(pool.plan));
  const Options gemm_options = ooc_test::host_options(smallest_limit(gemm.plan));
  ooc::testing::inject_fault("gemm", 1);
  EXPECT_EQ(thrown_by([&] { pool.run(pool_options, nullptr); }), "nothing");  // pooling issues no GEMM
  EXPECT_NE(thrown_by([&] { gemm.run(gemm_options, nullptr); }).find("injected fault: gemm"), std::string::npos);
}

// Caller memory DMA'd directly (as pinned memory is on the GPU): the strided copies count as
// copies, and zeroing a chunk's halo outside the tensor (padding 1) as a copy within the device.
TEST_F(HostFaultSites, DirectDmaCopiesAndHaloZeroing) {
  ooc::testing::set_host_direct_access(true);
  const SiteCase& conv = site_cases()[1];
  const Options o = ooc_test::host_options(smallest_limit(conv.plan));
  const std::vector<float> before = conv.run(o, nullptr);
  ooc::testing::inject_fault("copy", 2);
  EXPECT_EQ(thrown_by([&] { conv.run(o, nullptr); }).rfind("cuda_error: injected fault: copy_h2d_strided", 0), 0u);
  ooc::testing::inject_fault("device_copy", 1);
  EXPECT_EQ(thrown_by([&] { conv.run(o, nullptr); }).rfind("cuda_error: injected fault: zero_device", 0), 0u);
  EXPECT_EQ(conv.run(o, nullptr), before);
}

TEST_F(HostFaultSites, IgnoredUnlessTheHostBackendIsAsked) {
  ooc::testing::set_host_fault_injection(false);
  ooc::testing::inject_fault("conv", 1);
  ooc::testing::inject_fault("copy", 1);
  const SiteCase& conv = site_cases()[1];
  EXPECT_EQ(thrown_by([&] { conv.run(ooc_test::host_options(smallest_limit(conv.plan)), nullptr); }), "nothing");
}

TEST(InjectFault, RejectsAnUnknownSiteNamingTheValidOnes) {
  try {
    ooc::testing::inject_fault("disk", 1);
    FAIL() << "inject_fault accepted \"disk\"";
  } catch (const ooc::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("\"disk\""), std::string::npos) << message;
    for (const char* site : kSites)
      EXPECT_NE(message.find(std::string("\"") + site + "\""), std::string::npos) << site << ": " << message;
  }
}

}  // namespace
