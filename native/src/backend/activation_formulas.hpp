// Every activation's value, gradient and traits, written once for the host reference loops (double)
// and the CUDA kernel (float) alike; cuDNN runs the modes it has (backend/cuda/cudnn_layers.cpp),
// this kernel the others. Adding an activation: its name in OOC_ACTIVATION_MODES (ooc/types.hpp),
// then its case in each switch here. Unqualified math calls pick the host's double and the device's
// float overloads.
#pragma once

#include <cmath>
#include <limits>

#include "ooc/types.hpp"

#ifdef __CUDACC__
#define OOC_HOST_DEVICE __host__ __device__
#else
#define OOC_HOST_DEVICE
#endif

namespace ooc {

using std::erf;
using std::exp;
using std::expm1;
using std::tanh;

inline ActivationTraits activation_traits_of(ActivationMode mode) {
  const double required = std::numeric_limits<double>::quiet_NaN();
  switch (mode) {
    case ActivationMode::relu: return {"", 0.0, true};
    case ActivationMode::sigmoid: return {"", 0.0, true};
    case ActivationMode::tanh: return {"", 0.0, true};
    // Not from y: at the ceiling y is the ceiling rounded to float, which may be below it.
    case ActivationMode::clipped_relu: return {"ceiling", required, false};
    case ActivationMode::elu: return {"alpha", 1.0, false};
    case ActivationMode::swish: return {"beta", 1.0, false};
    case ActivationMode::gelu: return {"", 0.0, false};
    case ActivationMode::leaky_relu: return {"negative_slope", 0.01, false};  // torch's default
  }
  return {"", 0.0, false};
}

template <typename T>
OOC_HOST_DEVICE inline T activation_sigmoid(T v) {
  return T(1) / (T(1) + exp(-v));
}

// f(x); coef as activation_traits_of says.
template <typename T>
OOC_HOST_DEVICE inline T activation_value(ActivationMode mode, T coef, T x) {
  switch (mode) {
    case ActivationMode::relu: return x > T(0) ? x : T(0);
    case ActivationMode::sigmoid: return activation_sigmoid(x);
    case ActivationMode::tanh: return tanh(x);
    case ActivationMode::clipped_relu: {  // min(max(x, 0), coef), NaN passing through as std::max/min pass it
      const T m = x < T(0) ? T(0) : x;
      return coef < m ? coef : m;
    }
    case ActivationMode::elu: return x > T(0) ? x : coef * expm1(x);
    case ActivationMode::swish: return x * activation_sigmoid(coef * x);
    case ActivationMode::gelu: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));  // exact, as torch's
    case ActivationMode::leaky_relu: return x > T(0) ? x : coef * x;
  }
  return x;
}

// dy * f'(x), from y = f(x) where that is how cuDNN computes it.
template <typename T>
OOC_HOST_DEVICE inline T activation_gradient(ActivationMode mode, T coef, T y, T dy, T x) {
  switch (mode) {
    case ActivationMode::relu: return x > T(0) ? dy : T(0);
    case ActivationMode::sigmoid: return dy * y * (T(1) - y);
    case ActivationMode::tanh: return dy * (T(1) - y * y);
    case ActivationMode::clipped_relu: return x > T(0) && x < coef ? dy : T(0);
    case ActivationMode::elu: return x > T(0) ? dy : dy * coef * exp(x);
    case ActivationMode::swish: {
      const T s = activation_sigmoid(coef * x);
      return dy * (s + coef * x * s * (T(1) - s));
    }
    case ActivationMode::gelu:  // Phi(x) + x * phi(x)
      return dy * (T(0.5) * (T(1) + erf(x * T(0.70710678118654752440))) +
                   x * T(0.39894228040143267794) * exp(T(-0.5) * x * x));
    case ActivationMode::leaky_relu: return x > T(0) ? dy : coef * dy;
  }
  return dy;
}

}  // namespace ooc
