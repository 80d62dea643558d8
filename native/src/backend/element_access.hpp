// The element types of ooc::DType as kernels read them, on the host and on the device alike:
// float32, and float16 / bfloat16 through CUDA's own conversions (cuda_fp16.h, cuda_bf16.h: round
// to nearest even, callable from host and device code). Both backends' half-precision kernels use
// these, so the host reference and the CUDA kernels round the same way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ooc/problem.hpp"

#if defined(__CUDACC__)
#define OOC_HOST_DEVICE __host__ __device__
#else
#define OOC_HOST_DEVICE
#endif

namespace ooc::element_access {

OOC_HOST_DEVICE inline float load(float v) { return v; }
OOC_HOST_DEVICE inline float load(__half v) { return __half2float(v); }
OOC_HOST_DEVICE inline float load(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
OOC_HOST_DEVICE T store(float v);
template <>
OOC_HOST_DEVICE inline float store<float>(float v) { return v; }
template <>
OOC_HOST_DEVICE inline __half store<__half>(float v) { return __float2half_rn(v); }
template <>
OOC_HOST_DEVICE inline __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls fn(T{}) with T the C++ type of `dtype` (on the host: it picks the kernel to launch or run).
template <typename Fn>
void with_type(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::float32: fn(float{}); return;
    case DType::float16: fn(__half{}); return;
    case DType::bfloat16: fn(__nv_bfloat16{}); return;
  }
}

}  // namespace ooc::element_access
