// Helpers for the C API tests: owning cuDNN descriptors made the way a cuDNN program makes them,
// one convolution's descriptors built from its shapes, the host-backend fixture of the CPU tests
// and their checks of a chunked run.
#pragma once

#include <cudnn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend_fixtures.hpp"
#include "capi/capi_internal.hpp"
#include "ooc/ooc.hpp"
#include "ooc/ooc_cudnn.h"
#include "test_util.hpp"

namespace ooc_test {

template <typename Handle, cudnnStatus_t (*Destroy)(Handle)>
struct DescriptorDeleter {
  void operator()(Handle h) const { (void)Destroy(h); }
};
using Tensor = std::unique_ptr<std::remove_pointer_t<cudnnTensorDescriptor_t>,
                               DescriptorDeleter<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>>;
using Filter = std::unique_ptr<std::remove_pointer_t<cudnnFilterDescriptor_t>,
                               DescriptorDeleter<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>>;
using Convolution = std::unique_ptr<std::remove_pointer_t<cudnnConvolutionDescriptor_t>,
                                    DescriptorDeleter<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>>;
using Activation = std::unique_ptr<std::remove_pointer_t<cudnnActivationDescriptor_t>,
                                   DescriptorDeleter<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>>;
using Pooling = std::unique_ptr<std::remove_pointer_t<cudnnPoolingDescriptor_t>,
                                DescriptorDeleter<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>>;

inline std::vector<int> ints(const Shape& s) { return std::vector<int>(s.begin(), s.end()); }

inline std::vector<int> packed_strides(const Shape& dims) {
  std::vector<int> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * static_cast<int>(dims[i + 1]);
  return strides;
}

// A descriptor just made by its cudnnCreate*Descriptor, owned, not set yet.
template <typename Owner, typename Handle>
Owner created(cudnnStatus_t (*create)(Handle*)) {
  Handle d = nullptr;
  EXPECT_EQ(create(&d), CUDNN_STATUS_SUCCESS);
  return Owner(d);
}

inline Tensor unset_tensor() { return created<Tensor>(cudnnCreateTensorDescriptor); }
inline Filter unset_filter() { return created<Filter>(cudnnCreateFilterDescriptor); }
inline Convolution unset_convolution() { return created<Convolution>(cudnnCreateConvolutionDescriptor); }
inline Pooling unset_pooling() { return created<Pooling>(cudnnCreatePoolingDescriptor); }

// strides empty: fully packed.
inline Tensor tensor(const Shape& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT, std::vector<int> strides = {}) {
  Tensor t = unset_tensor();
  if (strides.empty()) strides = packed_strides(dims);
  const std::vector<int> d = ints(dims);
  EXPECT_EQ(cudnnSetTensorNdDescriptor(t.get(), type, static_cast<int>(d.size()), d.data(), strides.data()),
            CUDNN_STATUS_SUCCESS)
      << shape_str(dims);
  return t;
}

inline Filter filter(const Shape& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT,
                     cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW) {
  Filter f = unset_filter();
  const std::vector<int> d = ints(dims);
  EXPECT_EQ(cudnnSetFilterNdDescriptor(f.get(), type, format, static_cast<int>(d.size()), d.data()), CUDNN_STATUS_SUCCESS)
      << shape_str(dims);
  return f;
}

// FMA math: plain FP32, in cuDNN and (honouring it) the out-of-core path, so the two agree to fp32
// rounding.
inline Convolution convolution(const Shape& padding, const Shape& stride, const Shape& dilation,
                               cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION,
                               cudnnDataType_t compute = CUDNN_DATA_FLOAT, int groups = 1) {
  Convolution c = unset_convolution();
  const std::vector<int> p = ints(padding), s = ints(stride), d = ints(dilation);
  EXPECT_EQ(cudnnSetConvolutionNdDescriptor(c.get(), static_cast<int>(p.size()), p.data(), s.data(), d.data(), mode,
                                            compute),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetConvolutionMathType(c.get(), CUDNN_FMA_MATH), CUDNN_STATUS_SUCCESS);
  if (groups != 1) {
    EXPECT_EQ(cudnnSetConvolutionGroupCount(c.get(), groups), CUDNN_STATUS_SUCCESS);
  }
  return c;
}

// coef: clipped ReLU's ceiling, ELU's alpha, swish's beta (cudnnSetActivationDescriptorSwishBeta).
inline Activation activation(cudnnActivationMode_t mode, double coef = 0.0) {
  Activation a = created<Activation>(cudnnCreateActivationDescriptor);
  EXPECT_EQ(cudnnSetActivationDescriptor(a.get(), mode, CUDNN_NOT_PROPAGATE_NAN,
                                         mode == CUDNN_ACTIVATION_SWISH ? 0.0 : coef),
            CUDNN_STATUS_SUCCESS);
  if (mode == CUDNN_ACTIVATION_SWISH) {
    EXPECT_EQ(cudnnSetActivationDescriptorSwishBeta(a.get(), coef), CUDNN_STATUS_SUCCESS);
  }
  return a;
}

inline Pooling pooling(cudnnPoolingMode_t mode, const Shape& window, const Shape& padding, const Shape& stride) {
  Pooling p = unset_pooling();
  const std::vector<int> w = ints(window), pad = ints(padding), s = ints(stride);
  EXPECT_EQ(cudnnSetPoolingNdDescriptor(p.get(), mode, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(w.size()), w.data(),
                                        pad.data(), s.data()),
            CUDNN_STATUS_SUCCESS);
  return p;
}

// One convolution as a cuDNN program describes it: x, w, y (= dx, dw, dy) and the bias [1, K, 1...].
struct ConvDescriptors {
  ooc::ConvProblem problem;  // forward geometry (alpha 1, beta 0)
  Tensor x, y, bias;
  Filter w;
  Convolution conv;

  ConvDescriptors(const Shape& x_shape, const Shape& w_shape, const Shape& padding, const Shape& stride,
                  const Shape& dilation, int groups = 1)
      : problem(ooc::ConvProblem::forward(x_shape, w_shape, stride, padding, dilation, groups, 1.0, 0.0, false)),
        x(tensor(x_shape)),
        y(tensor(problem.y_shape())),
        bias(tensor(bias_dims(x_shape.size(), w_shape[0]))),
        w(filter(w_shape)),
        conv(convolution(padding, stride, dilation, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT, groups)) {}

  static Shape bias_dims(size_t rank, int64_t k) {
    Shape s(rank, 1);
    s[1] = k;
    return s;
  }
};

// Stands in for a cudnnCreate (or cublasCreate) handle where the API must not touch it (it would
// crash if it did): the host-backend tests never reach CUDA.
inline int dummy_handle_storage;
template <typename Handle = cudnnHandle_t>
Handle dummy_handle() {
  return reinterpret_cast<Handle>(&dummy_handle_storage);
}

// CPU tests of the C API: every call runs the out-of-core path on the host backend, so a call that
// wrongly passes validation fails its status check instead of reaching CUDA with a dummy handle.
class HostBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { ooc::capi::testing::use_host_backend(true); }
  void TearDown() override {
    ooc::capi::testing::use_host_backend(false);
    oocSetMemoryLimit(0);
  }
};

// What the calling thread's last C API call left behind, for failure messages.
inline std::string last_error() {
  char buf[1024];
  oocGetLastErrorString(buf, sizeof(buf));
  return buf;
}

inline std::string last_plan() {
  const size_t n = oocGetLastPlanDescription(nullptr, 0);
  std::string s(n + 1, '\0');
  oocGetLastPlanDescription(s.data(), s.size());
  s.resize(n);
  return s;
}

// fp32 results against float64 references: every element written (outputs start as NaN where
// they are not read) and within 1e-5 of the reference's norm.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Comparison c = compare(got, want);
  EXPECT_EQ(c.non_finite, 0) << what << ": first bad element " << c.first_bad;
  EXPECT_LE(c.relative_error, 1e-5) << what;
}

// The last call ran out of core in more than one chunk, within the memory limit.
inline void expect_split_run(const std::string& what) {
  oocPlanInfo_t info{};
  ASSERT_EQ(oocGetLastPlanInfo(&info), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(info.outOfCore, 1) << what;
  EXPECT_GT(info.chunks, 1) << what << "\n" << last_plan();
  EXPECT_GT(info.peakDeviceBytes, 0u);
  EXPECT_LE(info.peakDeviceBytes, oocGetMemoryLimit()) << last_plan();
  EXPECT_GT(info.bytesH2D, 0u);
  EXPECT_NE(last_plan(), "");
}

// Twice the smallest budget any plan of `plan(options)` needs (it throws out_of_budget under a
// 1-byte limit, saying how much): small enough to split, large enough to plan.
template <typename PlanFor>
size_t split_budget(PlanFor plan, ooc::BackendKind backend = ooc::BackendKind::host) {
  ooc::Options o;
  o.backend = backend;
  o.memory_limit = 1;
  try {
    plan(o);
  } catch (const ooc::out_of_budget& e) {
    return 2 * e.needed_bytes();
  }
  ADD_FAILURE() << "a 1-byte budget did not throw out_of_budget";
  return 1;
}

}  // namespace ooc_test
