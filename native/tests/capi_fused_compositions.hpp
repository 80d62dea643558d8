// The compositions of unfused cuDNN calls that ooc_cudnn.h documents each fused entry point as
// replacing, written once over a table of entry points: cuDNN's own (the GPU tests' reference) or
// the ooc_ look-alikes (the CPU tests', run on the host backend). Each returns the first failing
// status. Scratch tensors are the caller's, in memory the table's calls accept.
#pragma once

#include <cudnn.h>

#include "ooc/ooc_cudnn.h"

namespace ooc_test {

struct UnfusedCalls {
  decltype(&cudnnConvolutionForward) conv_forward;
  decltype(&cudnnConvolutionBackwardData) conv_backward_data;
  decltype(&cudnnConvolutionBackwardFilter) conv_backward_filter;
  decltype(&cudnnConvolutionBackwardBias) conv_backward_bias;
  decltype(&cudnnAddTensor) add_tensor;
  decltype(&cudnnActivationForward) activation_forward;
  decltype(&cudnnActivationBackward) activation_backward;
  decltype(&cudnnPoolingForward) pooling_forward;
  decltype(&cudnnPoolingBackward) pooling_backward;
};

inline const UnfusedCalls kCudnnCalls{&cudnnConvolutionForward,    &cudnnConvolutionBackwardData,
                                      &cudnnConvolutionBackwardFilter, &cudnnConvolutionBackwardBias,
                                      &cudnnAddTensor,             &cudnnActivationForward,
                                      &cudnnActivationBackward,    &cudnnPoolingForward,
                                      &cudnnPoolingBackward};
inline const UnfusedCalls kOocCalls{&ooc_cudnnConvolutionForward,    &ooc_cudnnConvolutionBackwardData,
                                    &ooc_cudnnConvolutionBackwardFilter, &ooc_cudnnConvolutionBackwardBias,
                                    &ooc_cudnnAddTensor,             &ooc_cudnnActivationForward,
                                    &ooc_cudnnActivationBackward,    &ooc_cudnnPoolingForward,
                                    &ooc_cudnnPoolingBackward};

#define OOC_COMPOSE_STEP(call)                                \
  do {                                                        \
    const cudnnStatus_t step_status = (call);                 \
    if (step_status != CUDNN_STATUS_SUCCESS) return step_status; \
  } while (0)

// t += alpha2 * z (when alpha2 != 0); t += bias; t = act(t) (act null: identity).
inline cudnnStatus_t compose_bias_activation(const UnfusedCalls& u, cudnnHandle_t h, float alpha2,
                                             cudnnTensorDescriptor_t tDesc, const void* z,
                                             cudnnTensorDescriptor_t biasDesc, const void* bias,
                                             cudnnActivationDescriptor_t act, void* t) {
  const float one = 1.0f, zero = 0.0f;
  if (alpha2 != 0.0f) OOC_COMPOSE_STEP(u.add_tensor(h, &alpha2, tDesc, z, &one, tDesc, t));
  OOC_COMPOSE_STEP(u.add_tensor(h, &one, biasDesc, bias, &one, tDesc, t));
  if (act) OOC_COMPOSE_STEP(u.activation_forward(h, act, &one, tDesc, t, &zero, tDesc, t));
  return CUDNN_STATUS_SUCCESS;
}

// y = pool(act(alpha1 * conv(x, w) + alpha2 * z + bias)), through t (conv-output-shaped, tDesc).
inline cudnnStatus_t compose_conv_bias_activation_pooling(
    const UnfusedCalls& u, cudnnHandle_t h, float alpha1, cudnnTensorDescriptor_t xDesc, const void* x,
    cudnnFilterDescriptor_t wDesc, const void* w, cudnnConvolutionDescriptor_t conv, float alpha2,
    cudnnTensorDescriptor_t tDesc, const void* z, cudnnTensorDescriptor_t biasDesc, const void* bias,
    cudnnActivationDescriptor_t act, cudnnPoolingDescriptor_t pool, void* t, cudnnTensorDescriptor_t yDesc, void* y) {
  const float one = 1.0f, zero = 0.0f;
  OOC_COMPOSE_STEP(u.conv_forward(h, &alpha1, xDesc, x, wDesc, w, conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                  nullptr, 0, &zero, tDesc, t));
  OOC_COMPOSE_STEP(compose_bias_activation(u, h, alpha2, tDesc, z, biasDesc, bias, act, t));
  return u.pooling_forward(h, pool, &one, tDesc, t, &zero, yDesc, y);
}

// y = act(alpha1 * conv_transpose(x, w) + alpha2 * z + bias): cuDNN's backward data, x as its dy.
inline cudnnStatus_t compose_deconv_bias_activation(const UnfusedCalls& u, cudnnHandle_t h, float alpha1,
                                                    cudnnTensorDescriptor_t xDesc, const void* x,
                                                    cudnnFilterDescriptor_t wDesc, const void* w,
                                                    cudnnConvolutionDescriptor_t conv, float alpha2, const void* z,
                                                    cudnnTensorDescriptor_t biasDesc, const void* bias,
                                                    cudnnActivationDescriptor_t act, cudnnTensorDescriptor_t yDesc,
                                                    void* y) {
  const float zero = 0.0f;
  OOC_COMPOSE_STEP(u.conv_backward_data(h, &alpha1, wDesc, w, xDesc, x, conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                        nullptr, 0, &zero, yDesc, y));
  return compose_bias_activation(u, h, alpha2, yDesc, z, biasDesc, bias, act, y);
}

// dx, dw, db of dy (fresh).
inline cudnnStatus_t compose_backward_data_filter_bias(const UnfusedCalls& u, cudnnHandle_t h,
                                                       cudnnTensorDescriptor_t xDesc, const void* x,
                                                       cudnnTensorDescriptor_t dyDesc, const void* dy,
                                                       cudnnFilterDescriptor_t wDesc, const void* w,
                                                       cudnnConvolutionDescriptor_t conv, void* dx, void* dw,
                                                       cudnnTensorDescriptor_t dbDesc, void* db) {
  const float one = 1.0f, zero = 0.0f;
  OOC_COMPOSE_STEP(u.conv_backward_data(h, &one, wDesc, w, dyDesc, dy, conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                        nullptr, 0, &zero, xDesc, dx));
  OOC_COMPOSE_STEP(u.conv_backward_filter(h, &one, xDesc, x, dyDesc, dy, conv, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                                          nullptr, 0, &zero, wDesc, dw));
  return u.conv_backward_bias(h, &one, dyDesc, dy, &zero, dbDesc, db);
}

// dz = act'(pre) * dy into dz (act null: dz = dy, copied), then the three gradients of dz.
inline cudnnStatus_t compose_activation_backward_data_filter_bias(
    const UnfusedCalls& u, cudnnHandle_t h, cudnnActivationDescriptor_t act, cudnnTensorDescriptor_t xDesc,
    const void* x, cudnnFilterDescriptor_t wDesc, const void* w, cudnnConvolutionDescriptor_t conv,
    cudnnTensorDescriptor_t yDesc, const void* y, const void* pre, const void* dy, void* dz, void* dx, void* dw,
    cudnnTensorDescriptor_t dbDesc, void* db) {
  const float one = 1.0f, zero = 0.0f;
  if (act)
    OOC_COMPOSE_STEP(u.activation_backward(h, act, &one, yDesc, y, yDesc, dy, yDesc, pre, &zero, yDesc, dz));
  else
    OOC_COMPOSE_STEP(u.add_tensor(h, &one, yDesc, dy, &zero, yDesc, dz));
  return compose_backward_data_filter_bias(u, h, xDesc, x, yDesc, dz, wDesc, w, conv, dx, dw, dbDesc, db);
}

// dy = pool'(q, dq, y) into dz, dz = act'(pre) * dz in place, then the three gradients of dz.
inline cudnnStatus_t compose_pooling_activation_backward_data_filter_bias(
    const UnfusedCalls& u, cudnnHandle_t h, cudnnPoolingDescriptor_t pool, cudnnActivationDescriptor_t act,
    cudnnTensorDescriptor_t xDesc, const void* x, cudnnFilterDescriptor_t wDesc, const void* w,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t yDesc, const void* y, const void* pre,
    cudnnTensorDescriptor_t qDesc, const void* q, const void* dq, void* dz, void* dx, void* dw,
    cudnnTensorDescriptor_t dbDesc, void* db) {
  const float one = 1.0f, zero = 0.0f;
  OOC_COMPOSE_STEP(u.pooling_backward(h, pool, &one, qDesc, q, qDesc, dq, yDesc, y, &zero, yDesc, dz));
  if (act) OOC_COMPOSE_STEP(u.activation_backward(h, act, &one, yDesc, y, yDesc, dz, yDesc, pre, &zero, yDesc, dz));
  return compose_backward_data_filter_bias(u, h, xDesc, x, yDesc, dz, wDesc, w, conv, dx, dw, dbDesc, db);
}

#undef OOC_COMPOSE_STEP

}  // namespace ooc_test
