// Owning wrappers for cuDNN handles and descriptors: created in the constructor (throwing
// cudnn_error on failure), destroyed exactly once in the destructor, never copied.
#pragma once

#include <cudnn.h>

#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "ooc/problem.hpp"

namespace ooc {

// Traits name the create/destroy pair of one cuDNN object type (and the call for error messages).
template <typename Traits>
class CudnnObject {
 public:
  using Handle = typename Traits::Handle;

  CudnnObject() { cuda_detail::check_cudnn(Traits::create(&handle_), Traits::create_call, __FILE__, __LINE__); }
  ~CudnnObject() {
    if (handle_) (void)Traits::destroy(handle_);  // nothing useful to do with a failure here
  }
  CudnnObject(const CudnnObject&) = delete;
  CudnnObject& operator=(const CudnnObject&) = delete;

  Handle get() const noexcept { return handle_; }
  operator Handle() const noexcept { return handle_; }  // pass straight to cuDNN calls

 private:
  Handle handle_ = nullptr;
};

struct CudnnHandleTraits {
  using Handle = cudnnHandle_t;
  static constexpr const char* create_call = "cudnnCreate";
  static cudnnStatus_t create(Handle* h) { return cudnnCreate(h); }
  static cudnnStatus_t destroy(Handle h) { return cudnnDestroy(h); }
};

struct TensorDescriptorTraits {
  using Handle = cudnnTensorDescriptor_t;
  static constexpr const char* create_call = "cudnnCreateTensorDescriptor";
  static cudnnStatus_t create(Handle* h) { return cudnnCreateTensorDescriptor(h); }
  static cudnnStatus_t destroy(Handle h) { return cudnnDestroyTensorDescriptor(h); }
};

struct FilterDescriptorTraits {
  using Handle = cudnnFilterDescriptor_t;
  static constexpr const char* create_call = "cudnnCreateFilterDescriptor";
  static cudnnStatus_t create(Handle* h) { return cudnnCreateFilterDescriptor(h); }
  static cudnnStatus_t destroy(Handle h) { return cudnnDestroyFilterDescriptor(h); }
};

struct ConvolutionDescriptorTraits {
  using Handle = cudnnConvolutionDescriptor_t;
  static constexpr const char* create_call = "cudnnCreateConvolutionDescriptor";
  static cudnnStatus_t create(Handle* h) { return cudnnCreateConvolutionDescriptor(h); }
  static cudnnStatus_t destroy(Handle h) { return cudnnDestroyConvolutionDescriptor(h); }
};

struct ActivationDescriptorTraits {
  using Handle = cudnnActivationDescriptor_t;
  static constexpr const char* create_call = "cudnnCreateActivationDescriptor";
  static cudnnStatus_t create(Handle* h) { return cudnnCreateActivationDescriptor(h); }
  static cudnnStatus_t destroy(Handle h) { return cudnnDestroyActivationDescriptor(h); }
};

struct PoolingDescriptorTraits {
  using Handle = cudnnPoolingDescriptor_t;
  static constexpr const char* create_call = "cudnnCreatePoolingDescriptor";
  static cudnnStatus_t create(Handle* h) { return cudnnCreatePoolingDescriptor(h); }
  static cudnnStatus_t destroy(Handle h) { return cudnnDestroyPoolingDescriptor(h); }
};

// Fully packed strides of `rank` dims (N, C, spatial...) in `layout`: NC(D)HW, or N(D)HWC with C
// innermost (a chunk's buffers are dense in its problem's layout). Returns the element count, for
// the callers' check against cuDNN's int indexing.
inline int64_t packed_strides(const int* dims, int rank, Layout layout, int* strides) {
  const auto order = layout_order(layout, rank);  // outermost to innermost in memory
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[order[i]] = static_cast<int>(stride);
    stride *= dims[order[i]];
  }
  return stride;
}

using CudnnHandle = CudnnObject<CudnnHandleTraits>;
using TensorDescriptor = CudnnObject<TensorDescriptorTraits>;
using FilterDescriptor = CudnnObject<FilterDescriptorTraits>;
using ConvolutionDescriptor = CudnnObject<ConvolutionDescriptorTraits>;
using ActivationDescriptor = CudnnObject<ActivationDescriptorTraits>;
using PoolingDescriptor = CudnnObject<PoolingDescriptorTraits>;

}  // namespace ooc
