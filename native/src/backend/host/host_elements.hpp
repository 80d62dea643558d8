// Host access to the element types of ooc::DType: float32, and float16 / bfloat16 through CUDA's
// own conversions (cuda_fp16.h, cuda_bf16.h: round to nearest even, callable from host code), so
// that the host kernels read and write any dtype while computing in float (and double where they
// reduce). Also the whole-buffer conversion the API uses where a reduction keeps float32 while its
// caller's tensor is half (a dw accumulated over every chunk).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ooc/problem.hpp"

namespace ooc::host_elements {

inline float load(float v) { return v; }
inline float load(__half v) { return __half2float(v); }
inline float load(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
T store(float v);
template <>
inline float store<float>(float v) { return v; }
template <>
inline __half store<__half>(float v) { return __float2half_rn(v); }
template <>
inline __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls fn(T{}) with T the C++ type of `dtype`.
template <typename Fn>
void with_type(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::float32: fn(float{}); return;
    case DType::float16: fn(__half{}); return;
    case DType::bfloat16: fn(__nv_bfloat16{}); return;
  }
}

// dst[i] = src[i] converted, for `count` elements of the two dtypes (src and dst do not overlap).
void convert(DType from, const void* src, DType to, void* dst, int64_t count);

}  // namespace ooc::host_elements
