// The C API's convolutions on a GPU: every entry point against plain cuDNN on the same inputs, for
// device, pinned, pageable and mixed caller memory, whole and split (capi_gpu_fixtures.hpp). Also
// ooc_cudaMalloc's device-then-pinned placement. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backward_run.hpp"
#include "capi_gpu_fixtures.hpp"

namespace {

using namespace ooc_test;

// An op's arguments: tensors in order, the last one the output (read and written).
using Call = std::function<cudnnStatus_t(cudnnHandle_t, bool use_ooc, const std::vector<void*>& data)>;

class CapiGpu : public CapiGpuTest {
 protected:
  // Plain cuDNN on device copies first (the reference), then the ooc_ call on the case's memory.
  void compare_with_cudnn(const std::vector<std::vector<float>>& tensors, size_t split_limit, const Call& call) {
    compare_with_library(tensors, {tensors.size() - 1}, split_limit,
                         [&](bool use_ooc, const std::vector<void*>& data) { return call(handle_, use_ooc, data); });
  }

  void check_forward(const ConvDescriptors& d, float alpha, float beta, unsigned seed);
  // w and groups: the large geometry's own (kW, 1) unless a grouped case says otherwise.
  void check_gradient(ooc::Operation op, float alpha, float beta, unsigned seed, const Shape& w, int groups);
};

// Large enough that twice the smallest plan is well below the whole problem.
const Shape kX{4, 16, 32, 32}, kW{24, 16, 3, 3}, kPad{1, 1}, kStride{1, 1}, kDilation{1, 1};

std::vector<float> random_tensor(int64_t count, std::mt19937& rng) {
  return random_vector(static_cast<size_t>(count), rng);
}

void CapiGpu::check_forward(const ConvDescriptors& d, float alpha, float beta, unsigned seed) {
  std::mt19937 rng(test_seed(seed));
  ooc::ConvProblem p = d.problem;  // the call's alpha and beta: beta != 0 plans y loads
  p.alpha = alpha;
  p.beta = beta;
  compare_with_cudnn({random_tensor(p.x_elements(), rng), random_tensor(p.w_elements(), rng),
                      random_tensor(p.y_elements(), rng)},
                     2 * needed_bytes(p, ooc::BackendKind::cuda),
                     [&](cudnnHandle_t h, bool use_ooc, const std::vector<void*>& t) {
                       auto fn = use_ooc ? ooc_cudnnConvolutionForward : cudnnConvolutionForward;
                       return fn(h, &alpha, d.x.get(), t[0], d.w.get(), t[1], d.conv.get(),
                                 CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, workspace_, kWorkspace, &beta, d.y.get(),
                                 t[2]);
                     });
}

TEST_P(CapiGpu, Forward) { check_forward(ConvDescriptors(kX, kW, kPad, kStride, kDilation), 1.25f, 0.5f, 11); }

TEST_P(CapiGpu, Forward3d) {
  check_forward(ConvDescriptors({2, 8, 12, 14, 16}, {12, 8, 3, 3, 3}, {1, 1, 1}, {1, 2, 1}, {1, 1, 2}), 1.0f, 0.0f, 12);
}

TEST_P(CapiGpu, BiasActivationForward) {
  ConvDescriptors d(kX, kW, kPad, kStride, kDilation);
  std::mt19937 rng(test_seed(13));
  ooc::ConvProblem p = d.problem;
  p.has_bias = true;
  p.alpha = 0.75;
  p.beta = 0.5;  // alpha2
  const Activation relu = activation(CUDNN_ACTIVATION_RELU);
  const float alpha1 = 0.75f, alpha2 = 0.5f;
  // z, bias, y: z != y, so the chunked path reads each y tile's start from z (the fused op).
  compare_with_cudnn({random_tensor(p.x_elements(), rng), random_tensor(p.w_elements(), rng),
                      random_tensor(p.y_elements(), rng), random_tensor(p.k, rng), random_tensor(p.y_elements(), rng)},
                     2 * needed_bytes(p, ooc::BackendKind::cuda),
                     [&](cudnnHandle_t h, bool use_ooc, const std::vector<void*>& t) {
                       auto fn = use_ooc ? ooc_cudnnConvolutionBiasActivationForward
                                         : cudnnConvolutionBiasActivationForward;
                       return fn(h, &alpha1, d.x.get(), t[0], d.w.get(), t[1], d.conv.get(),
                                 CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, workspace_, kWorkspace, &alpha2,
                                 d.y.get(), t[2], d.bias.get(), t[3], relu.get(), d.y.get(), t[4]);
                     });
}

// cudnnConvolutionBackward{Data,Filter,Bias} (op) of the large geometry with alpha and beta.
void CapiGpu::check_gradient(ooc::Operation op, float alpha, float beta, unsigned seed, const Shape& w, int groups) {
  const ConvDescriptors d(kX, w, kPad, kStride, kDilation, groups);
  std::mt19937 rng(test_seed(seed));
  BackwardSpec spec = backward_spec(op, kX, w, kStride, kPad, kDilation, alpha, beta);
  spec.groups = groups;
  const ooc::ConvProblem p = spec.problem();
  const auto tensors = gradient_call_tensors(p, [&](int64_t count) { return random_tensor(count, rng); });
  compare_with_cudnn(tensors, 2 * backward_needed_bytes(p, ooc::BackendKind::cuda),
                     [&](cudnnHandle_t h, bool use_ooc, const std::vector<void*>& t) {
                       switch (op) {
                         case ooc::Operation::backward_data: {
                           auto fn = use_ooc ? ooc_cudnnConvolutionBackwardData : cudnnConvolutionBackwardData;
                           return fn(h, &alpha, d.w.get(), t[0], d.y.get(), t[1], d.conv.get(),
                                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, workspace_, kWorkspace, &beta, d.x.get(), t[2]);
                         }
                         case ooc::Operation::backward_filter: {
                           auto fn = use_ooc ? ooc_cudnnConvolutionBackwardFilter : cudnnConvolutionBackwardFilter;
                           return fn(h, &alpha, d.x.get(), t[0], d.y.get(), t[1], d.conv.get(),
                                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, workspace_, kWorkspace, &beta, d.w.get(),
                                     t[2]);
                         }
                         default: {
                           auto fn = use_ooc ? ooc_cudnnConvolutionBackwardBias : cudnnConvolutionBackwardBias;
                           return fn(h, &alpha, d.y.get(), t[0], &beta, d.bias.get(), t[1]);
                         }
                       }
                     });
}

TEST_P(CapiGpu, BackwardData) { check_gradient(ooc::Operation::backward_data, 1.0f, 0.5f, 14, kW, 1); }

TEST_P(CapiGpu, BackwardFilter) { check_gradient(ooc::Operation::backward_filter, 1.0f, 1.0f, 15, kW, 1); }

TEST_P(CapiGpu, BackwardBias) { check_gradient(ooc::Operation::backward_bias, 1.0f, 0.5f, 16, kW, 1); }

// cudnnSetConvolutionGroupCount honoured: 4 groups of 4 input channels, and depthwise (16 groups of
// one channel, two filters each).
const Shape kWGrouped{24, 4, 3, 3}, kWDepthwise{32, 1, 3, 3};

TEST_P(CapiGpu, ForwardGrouped) { check_forward(ConvDescriptors(kX, kWGrouped, kPad, kStride, kDilation, 4), 1.0f, 0.5f, 17); }

TEST_P(CapiGpu, ForwardDepthwise) {
  check_forward(ConvDescriptors(kX, kWDepthwise, kPad, kStride, kDilation, 16), 1.0f, 0.0f, 18);
}

TEST_P(CapiGpu, BackwardDataGrouped) { check_gradient(ooc::Operation::backward_data, 1.0f, 0.5f, 19, kWGrouped, 4); }

TEST_P(CapiGpu, BackwardFilterDepthwise) {
  check_gradient(ooc::Operation::backward_filter, 1.0f, 1.0f, 20, kWDepthwise, 16);
}

// oocSetDevices with the one GPU listed twice: two pipelines on it, cuDNN's results as before.
class DevicesListed {
 public:
  DevicesListed(std::initializer_list<int> devices) : devices_(devices) {
    EXPECT_EQ(oocSetDevices(devices_.data(), static_cast<int>(devices_.size())), CUDNN_STATUS_SUCCESS);
  }
  ~DevicesListed() { oocSetDevices(nullptr, 0); }

 private:
  std::vector<int> devices_;
};

TEST_P(CapiGpu, ForwardOnTheGpuListedTwice) {
  const DevicesListed twice{0, 0};
  check_forward(ConvDescriptors(kX, kW, kPad, kStride, kDilation), 1.0f, 0.5f, 21);
}

TEST_P(CapiGpu, BackwardFilterOnTheGpuListedTwice) {
  const DevicesListed twice{0, 0};
  check_gradient(ooc::Operation::backward_filter, 1.0f, 1.0f, 22, kW, 1);
}

INSTANTIATE_TEST_SUITE_P(Memory, CapiGpu, gpu_cases(), case_name);

class CapiGpuMemory : public GpuTest<> {
 protected:
  void TearDown() override {
    oocSetDeviceAllocationLimit(static_cast<size_t>(-1));
    oocSetMemoryLimit(0);
  }
};

TEST_F(CapiGpuMemory, DeviceFirstThenPinnedAndEitherFreesAndSets) {
  oocSetDeviceAllocationLimit(3 << 20);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(ooc_cudaMalloc(&a, 2 << 20), cudaSuccess) << last_error();
  ASSERT_EQ(ooc_cudaMalloc(&b, 2 << 20), cudaSuccess) << last_error();  // beyond the cap: pinned host
  EXPECT_TRUE(ooc::is_device_memory(a));
  EXPECT_FALSE(ooc::is_device_memory(b));
  EXPECT_TRUE(ooc::is_device_accessible(b));
  ASSERT_EQ(ooc_cudaMemset(a, 0x3c, 2 << 20), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemset(b, 0x00, 2 << 20), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemcpy(b, a, 2 << 20, cudaMemcpyDeviceToDevice), cudaSuccess);  // kind is not trusted
  std::vector<unsigned char> host(2 << 20);
  ASSERT_EQ(ooc_cudaMemcpy(host.data(), b, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < host.size(); i += 4097) ASSERT_EQ(host[i], 0x3c) << i;
  EXPECT_EQ(ooc_cudaFree(a), cudaSuccess);
  EXPECT_EQ(ooc_cudaFree(b), cudaSuccess);
  // The freed device bytes count again.
  ASSERT_EQ(ooc_cudaMalloc(&a, 2 << 20), cudaSuccess);
  EXPECT_TRUE(ooc::is_device_memory(a));
  EXPECT_EQ(ooc_cudaFree(a), cudaSuccess);
}

TEST_F(CapiGpuMemory, MemoryLimitIsKeptFreeForTheChunkedPath) {
  oocSetMemoryLimit(size_t{1} << 40);  // more than any GPU has: no allocation may take the device
  void* p = nullptr;
  ASSERT_EQ(ooc_cudaMalloc(&p, 1 << 20), cudaSuccess) << last_error();
  EXPECT_FALSE(ooc::is_device_memory(p));
  EXPECT_TRUE(ooc::is_device_accessible(p));
  EXPECT_EQ(ooc_cudaFree(p), cudaSuccess);
}

}  // namespace
