// The C API's NHWC descriptors on a GPU: every convolution entry point with packed channels-last
// tensors and a CUDNN_TENSOR_NHWC filter against plain cuDNN on the same descriptors, for device,
// pinned, pageable and mixed caller memory, whole (device memory: cuDNN directly) and split (the
// chunks' own NHWC descriptors), groups too (capi_gpu_fixtures.hpp). Skips without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backward_run.hpp"
#include "capi_gpu_fixtures.hpp"
#include "capi_layouts.hpp"

namespace {

using namespace ooc_test;

const Shape kX{4, 16, 32, 32}, kPad{1, 1}, kStride{1, 1}, kDilation{1, 1};

class CapiChannelsLastGpu : public CapiGpuTest {
 protected:
  std::vector<float> random(int64_t count) { return random_vector(static_cast<size_t>(count), rng_); }

  void check_forward(const Shape& x, const Shape& w, const Shape& pad, int groups, float alpha, float beta) {
    const NhwcConv d(x, w, pad, Shape(pad.size(), 1), Shape(pad.size(), 1), groups);
    ooc::ConvProblem p = d.problem;
    p.alpha = alpha, p.beta = beta, p.layout = ooc::Layout::channels_last;
    compare_with_library({random(p.x_elements()), random(p.w_elements()), random(p.y_elements())}, {2},
                         2 * needed_bytes(p, ooc::BackendKind::cuda), [&](bool use_ooc, const std::vector<void*>& t) {
                           auto fn = use_ooc ? ooc_cudnnConvolutionForward : cudnnConvolutionForward;
                           return fn(handle_, &alpha, d.x.get(), t[0], d.w.get(), t[1], d.conv.get(),
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, workspace_, kWorkspace, &beta,
                                     d.y.get(), t[2]);
                         });
  }

  void check_gradient(ooc::Operation op, const Shape& w, int groups, float alpha, float beta) {
    const NhwcConv d(kX, w, kPad, kStride, kDilation, groups);
    BackwardSpec spec = backward_spec(op, kX, w, kStride, kPad, kDilation, alpha, beta);
    spec.groups = groups;
    ooc::ConvProblem p = spec.problem();
    p.layout = ooc::Layout::channels_last;
    const Tensor db = tensor(ConvDescriptors::bias_dims(kX.size(), w[0]));
    const auto tensors = gradient_call_tensors(p, [&](int64_t count) { return random(count); });
    exact_direct_ = op == ooc::Operation::backward_data;  // cuDNN may reduce dw and db by atomics
    compare_with_library(tensors, {tensors.size() - 1}, 2 * backward_needed_bytes(p, ooc::BackendKind::cuda),
                         [&](bool use_ooc, const std::vector<void*>& t) {
                           switch (op) {
                             case ooc::Operation::backward_data: {
                               auto fn = use_ooc ? ooc_cudnnConvolutionBackwardData : cudnnConvolutionBackwardData;
                               return fn(handle_, &alpha, d.w.get(), t[0], d.y.get(), t[1], d.conv.get(),
                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, workspace_, kWorkspace, &beta, d.x.get(),
                                         t[2]);
                             }
                             case ooc::Operation::backward_filter: {
                               auto fn = use_ooc ? ooc_cudnnConvolutionBackwardFilter : cudnnConvolutionBackwardFilter;
                               return fn(handle_, &alpha, d.x.get(), t[0], d.y.get(), t[1], d.conv.get(),
                                         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, workspace_, kWorkspace, &beta,
                                         d.w.get(), t[2]);
                             }
                             default: {
                               auto fn = use_ooc ? ooc_cudnnConvolutionBackwardBias : cudnnConvolutionBackwardBias;
                               return fn(handle_, &alpha, d.y.get(), t[0], &beta, db.get(), t[1]);
                             }
                           }
                         });
  }

  std::mt19937 rng_{test_seed(41)};
};

TEST_P(CapiChannelsLastGpu, Forward) { check_forward(kX, {24, 16, 3, 3}, kPad, 1, 1.25f, 0.5f); }
TEST_P(CapiChannelsLastGpu, Forward3d) { check_forward({2, 8, 12, 14, 16}, {12, 8, 3, 3, 3}, {1, 1, 1}, 1, 1.0f, 0.0f); }
TEST_P(CapiChannelsLastGpu, ForwardGrouped) { check_forward(kX, {24, 4, 3, 3}, kPad, 4, 1.0f, 0.5f); }
TEST_P(CapiChannelsLastGpu, BackwardData) { check_gradient(ooc::Operation::backward_data, {24, 16, 3, 3}, 1, 1.0f, 0.5f); }
TEST_P(CapiChannelsLastGpu, BackwardFilter) {
  check_gradient(ooc::Operation::backward_filter, {24, 16, 3, 3}, 1, 1.0f, 1.0f);
}
TEST_P(CapiChannelsLastGpu, BackwardBias) { check_gradient(ooc::Operation::backward_bias, {24, 16, 3, 3}, 1, 1.0f, 0.5f); }
TEST_P(CapiChannelsLastGpu, BackwardDataGrouped) {
  check_gradient(ooc::Operation::backward_data, {24, 4, 3, 3}, 4, 1.0f, 0.5f);
}

INSTANTIATE_TEST_SUITE_P(Memories, CapiChannelsLastGpu, gpu_cases(), case_name);

}  // namespace
