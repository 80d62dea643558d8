// cuBLAS' level 1 and 2 (ooc_cublasSaxpy, Sscal, Scopy, Sdot, Snrm2, Sgemv) over device, pinned
// or pageable memory, for the training loops that update weights and reduce bias gradients with
// them. Every vector on the device: cuBLAS itself with the caller's handle (its stream and pointer
// mode). Otherwise the vectors stream through the device in chunks within the memory limit, each
// chunk computed by cuBLAS on the handle's stream; reductions (dot, nrm2) combine the chunks'
// results in double. gemv is a GEMM of one row, y^T = x^T op(A)^T, which ooc_cublasSgemm plans
// (A, the large operand, tiled like any GEMM operand).
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/cuda_status.hpp"
#include "capi/capi_cublas.hpp"
#include "ooc/errors.hpp"
#include "ooc/ooc_cublas.h"

namespace ooc::capi {
namespace {

// Device buffers of the chunked path when no memory limit is set.
constexpr size_t kDefaultVectorBudget = size_t{64} << 20;

// One strided vector of a call: n elements, element i at data[i * inc], or for inc < 0 at
// data[(n - 1 - i) * -inc] (cuBLAS' convention). `written`: the call stores it.
struct Vector {
  const float* data;
  int inc;
  const char* name;
  bool written = false;
};

int64_t index_of(int64_t i, int64_t n, int inc) { return inc > 0 ? i * inc : (n - 1 - i) * int64_t{-inc}; }

void check_inc(int inc, const char* name) {
  if (inc == 0) throw invalid_argument(std::string(name) + " must not be 0");
}

// The elements a vector spans, first to last.
int64_t span(int64_t n, int inc) { return n > 0 ? (n - 1) * std::abs(int64_t{inc}) + 1 : 0; }

// The handle's pointer mode for one scope (the chunked path passes host scalars).
class PointerModeScope {
 public:
  PointerModeScope(cublasHandle_t handle, cublasPointerMode_t mode) : handle_(handle) {
    check_cublas(cublasGetPointerMode(handle, &saved_), "cublasGetPointerMode");
    check_cublas(cublasSetPointerMode(handle, mode), "cublasSetPointerMode");
  }
  ~PointerModeScope() { cublasSetPointerMode(handle_, saved_); }
  PointerModeScope(const PointerModeScope&) = delete;
  PointerModeScope& operator=(const PointerModeScope&) = delete;

 private:
  cublasHandle_t handle_;
  cublasPointerMode_t saved_ = CUBLAS_POINTER_MODE_HOST;
};

using Slots = std::vector<float*>;  // a chunk's device copies, one per vector of the call

struct DeviceFree {
  void operator()(void* p) const noexcept { cudaFree(p); }
};

// Streams elements [0, n) of `vectors` through the device: per chunk, each vector's elements
// are gathered (strided or reversed ones through a host buffer) and copied in on the handle's
// stream, kernel(count, device copies) issues cuBLAS on it, the written vectors are copied back
// and scattered. Waits for the handle's stream first (its work may produce the inputs) and after
// every chunk, so no host buffer is reused while a copy is in flight.
// What a streamed call did, for oocGetLastPlanInfo.
struct Streamed {
  RunStats stats;
  size_t device_bytes = 0;
};

template <typename Kernel>
Streamed stream_vectors(cublasHandle_t handle, int64_t n, std::vector<Vector> vectors, Kernel kernel) {
  const auto start = std::chrono::steady_clock::now();
  Streamed done;
  const Options options = cublas_out_of_core_options(handle);
  const size_t budget = options.memory_limit ? options.memory_limit
                        : default_memory_limit() ? default_memory_limit()
                                                 : kDefaultVectorBudget;
  const int64_t chunk = std::max<int64_t>(
      1, std::min<int64_t>(n, static_cast<int64_t>(budget / (vectors.size() * sizeof(float)))));
  cudaStream_t stream = nullptr;
  check_cublas(cublasGetStream(handle, &stream), "cublasGetStream");
  void* raw = nullptr;
  done.device_bytes = static_cast<size_t>(chunk) * vectors.size() * sizeof(float);
  OOC_API_CUDA_CHECK(cudaMalloc(&raw, done.device_bytes));
  const std::unique_ptr<void, DeviceFree> device(raw);
  Slots slots;
  for (size_t v = 0; v < vectors.size(); ++v) slots.push_back(static_cast<float*>(raw) + v * chunk);
  std::vector<std::vector<float>> staging(vectors.size());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    for (size_t v = 0; v < vectors.size(); ++v) {
      const Vector& x = vectors[v];
      const float* src = x.data + begin;
      if (x.inc != 1) {
        staging[v].resize(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) staging[v][i] = x.data[index_of(begin + i, n, x.inc)];
        src = staging[v].data();
      }
      OOC_API_CUDA_CHECK(cudaMemcpyAsync(slots[v], src, bytes, cudaMemcpyDefault, stream));
      done.stats.bytes_h2d += bytes;
    }
    kernel(static_cast<int>(count), slots);
    for (size_t v = 0; v < vectors.size(); ++v) {
      if (!vectors[v].written) continue;
      float* dst = vectors[v].inc == 1 ? const_cast<float*>(vectors[v].data) + begin : staging[v].data();
      OOC_API_CUDA_CHECK(cudaMemcpyAsync(dst, slots[v], bytes, cudaMemcpyDefault, stream));
      done.stats.bytes_d2h += bytes;
    }
    OOC_API_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t v = 0; v < vectors.size(); ++v)
      if (vectors[v].written && vectors[v].inc != 1)
        for (int64_t i = 0; i < count; ++i)
          const_cast<float*>(vectors[v].data)[index_of(begin + i, n, vectors[v].inc)] = staging[v][i];
    ++done.stats.chunks;
  }
  done.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return done;
}

// Records a call run on the host backend (tests) or streamed, as the thread's last call.
void record_vector_call(const char* call, int64_t n, const Streamed& streamed) {
  const std::string where = host_backend_for_tests() ? " on the host backend"
                                                     : " in " + std::to_string(streamed.stats.chunks) +
                                                           " chunks through " +
                                                           std::to_string(streamed.device_bytes) + " device bytes";
  record_streamed_call(std::string(call) + " out of core: " + std::to_string(n) + " elements" + where,
                       streamed.stats, streamed.device_bytes);
}

// The calls on the host backend (tests: CUDA is never touched), element by element as cuBLAS
// defines them; reductions in double.
template <typename Body>
void for_each_element(int64_t n, Body body) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace
}  // namespace ooc::capi

using namespace ooc;
using namespace ooc::capi;

extern "C" cublasStatus_t ooc_cublasSaxpy(cublasHandle_t handle, int n, const float* alpha, const float* x, int incx,
                                          float* y, int incy) {
  if (!handle) return null_handle("ooc_cublasSaxpy");
  return guarded_cublas("ooc_cublasSaxpy", [&]() -> cublasStatus_t {
    check_inc(incx, "incx");
    check_inc(incy, "incy");
    require_pointer(alpha, "alpha");
    if (n <= 0) return CUBLAS_STATUS_SUCCESS;
    require_pointers({{x, "x"}, {y, "y"}});
    if (auto direct = in_core("cublasSaxpy", {{x, span(n, incx)}, {y, span(n, incy)}})) {
      const cublasStatus_t status = cublasSaxpy(handle, n, alpha, x, incx, y, incy);
      if (status == CUBLAS_STATUS_SUCCESS) record_direct_call(std::move(*direct));
      return status;
    }
    if (!host_backend_for_tests()) cublas_out_of_core_options(handle);  // alpha may be the stream's result
    const float a = read_scalar(handle, alpha);
    Streamed streamed;
    if (host_backend_for_tests()) {
      for_each_element(n, [&](int64_t i) { y[index_of(i, n, incy)] += a * x[index_of(i, n, incx)]; });
    } else {
      const PointerModeScope host(handle, CUBLAS_POINTER_MODE_HOST);
      streamed = stream_vectors(handle, n, {{x, incx, "x"}, {y, incy, "y", true}},
                                [&](int count, const Slots& d) {
        check_cublas(cublasSaxpy(handle, count, &a, d[0], 1, d[1], 1), "cublasSaxpy");
      });
    }
    record_vector_call("cublasSaxpy", n, streamed);
    return CUBLAS_STATUS_SUCCESS;
  });
}

extern "C" cublasStatus_t ooc_cublasSscal(cublasHandle_t handle, int n, const float* alpha, float* x, int incx) {
  if (!handle) return null_handle("ooc_cublasSscal");
  return guarded_cublas("ooc_cublasSscal", [&]() -> cublasStatus_t {
    check_inc(incx, "incx");
    require_pointer(alpha, "alpha");
    if (n <= 0) return CUBLAS_STATUS_SUCCESS;
    require_pointer(x, "x");
    if (auto direct = in_core("cublasSscal", {{x, span(n, incx)}})) {
      const cublasStatus_t status = cublasSscal(handle, n, alpha, x, incx);
      if (status == CUBLAS_STATUS_SUCCESS) record_direct_call(std::move(*direct));
      return status;
    }
    if (!host_backend_for_tests()) cublas_out_of_core_options(handle);
    const float a = read_scalar(handle, alpha);
    Streamed streamed;
    if (host_backend_for_tests()) {
      for_each_element(n, [&](int64_t i) { x[index_of(i, n, incx)] *= a; });
    } else {
      const PointerModeScope host(handle, CUBLAS_POINTER_MODE_HOST);
      streamed = stream_vectors(handle, n, {{x, incx, "x", true}}, [&](int count, const Slots& d) {
        check_cublas(cublasSscal(handle, count, &a, d[0], 1), "cublasSscal");
      });
    }
    record_vector_call("cublasSscal", n, streamed);
    return CUBLAS_STATUS_SUCCESS;
  });
}

extern "C" cublasStatus_t ooc_cublasScopy(cublasHandle_t handle, int n, const float* x, int incx, float* y, int incy) {
  if (!handle) return null_handle("ooc_cublasScopy");
  return guarded_cublas("ooc_cublasScopy", [&]() -> cublasStatus_t {
    check_inc(incx, "incx");
    check_inc(incy, "incy");
    if (n <= 0) return CUBLAS_STATUS_SUCCESS;
    require_pointers({{x, "x"}, {y, "y"}});
    if (auto direct = in_core("cublasScopy", {{x, span(n, incx)}, {y, span(n, incy)}})) {
      const cublasStatus_t status = cublasScopy(handle, n, x, incx, y, incy);
      if (status == CUBLAS_STATUS_SUCCESS) record_direct_call(std::move(*direct));
      return status;
    }
    Streamed streamed;
    if (host_backend_for_tests()) {
      for_each_element(n, [&](int64_t i) { y[index_of(i, n, incy)] = x[index_of(i, n, incx)]; });
    } else {
      streamed = stream_vectors(handle, n, {{x, incx, "x"}, {y, incy, "y", true}},
                                [&](int count, const Slots& d) {
        check_cublas(cublasScopy(handle, count, d[0], 1, d[1], 1), "cublasScopy");
      });
    }
    record_vector_call("cublasScopy", n, streamed);
    return CUBLAS_STATUS_SUCCESS;
  });
}

extern "C" cublasStatus_t ooc_cublasSdot(cublasHandle_t handle, int n, const float* x, int incx, const float* y,
                                         int incy, float* result) {
  if (!handle) return null_handle("ooc_cublasSdot");
  return guarded_cublas("ooc_cublasSdot", [&]() -> cublasStatus_t {
    check_inc(incx, "incx");
    check_inc(incy, "incy");
    require_pointer(result, "result");
    if (n > 0) require_pointers({{x, "x"}, {y, "y"}});
    if (n <= 0 && host_backend_for_tests()) {
      *result = 0.0f;
      return CUBLAS_STATUS_SUCCESS;
    }
    const auto direct = in_core("cublasSdot", {{x, span(n, incx)}, {y, span(n, incy)}});
    if (n <= 0 || direct) {  // n <= 0: cuBLAS writes the 0 wherever result is
      const cublasStatus_t status = cublasSdot(handle, n, x, incx, y, incy, result);
      if (status == CUBLAS_STATUS_SUCCESS) record_direct_call(direct ? *direct : "cublasSdot: n <= 0, the result is 0");
      return status;
    }
    double sum = 0.0;
    Streamed streamed;
    if (host_backend_for_tests()) {
      for_each_element(n, [&](int64_t i) {
        sum += static_cast<double>(x[index_of(i, n, incx)]) * y[index_of(i, n, incy)];
      });
    } else {
      const PointerModeScope host(handle, CUBLAS_POINTER_MODE_HOST);
      streamed = stream_vectors(handle, n, {{x, incx, "x"}, {y, incy, "y"}}, [&](int count, const Slots& d) {
        float part = 0.0f;
        check_cublas(cublasSdot(handle, count, d[0], 1, d[1], 1, &part), "cublasSdot");
        sum += part;
      });
    }
    write_scalar(handle, result, static_cast<float>(sum));  // where the caller's pointer mode says
    record_vector_call("cublasSdot", n, streamed);
    return CUBLAS_STATUS_SUCCESS;
  });
}

extern "C" cublasStatus_t ooc_cublasSnrm2(cublasHandle_t handle, int n, const float* x, int incx, float* result) {
  if (!handle) return null_handle("ooc_cublasSnrm2");
  return guarded_cublas("ooc_cublasSnrm2", [&]() -> cublasStatus_t {
    check_inc(incx, "incx");
    require_pointer(result, "result");
    if (n > 0) require_pointer(x, "x");
    if (n <= 0 && host_backend_for_tests()) {
      *result = 0.0f;
      return CUBLAS_STATUS_SUCCESS;
    }
    const auto direct = in_core("cublasSnrm2", {{x, span(n, incx)}});
    if (n <= 0 || direct) {
      const cublasStatus_t status = cublasSnrm2(handle, n, x, incx, result);
      if (status == CUBLAS_STATUS_SUCCESS) record_direct_call(direct ? *direct : "cublasSnrm2: n <= 0, the result is 0");
      return status;
    }
    // Chunk norms r_i combine as sqrt(sum r_i^2), in double: no overflow where cuBLAS has none.
    double squares = 0.0;
    Streamed streamed;
    if (host_backend_for_tests()) {
      for_each_element(n, [&](int64_t i) {
        const double v = x[index_of(i, n, incx)];
        squares += v * v;
      });
    } else {
      const PointerModeScope host(handle, CUBLAS_POINTER_MODE_HOST);
      streamed = stream_vectors(handle, n, {{x, incx, "x"}}, [&](int count, const Slots& d) {
        float part = 0.0f;
        check_cublas(cublasSnrm2(handle, count, d[0], 1, &part), "cublasSnrm2");
        squares += static_cast<double>(part) * part;
      });
    }
    write_scalar(handle, result, static_cast<float>(std::sqrt(squares)));
    record_vector_call("cublasSnrm2", n, streamed);
    return CUBLAS_STATUS_SUCCESS;
  });
}

extern "C" cublasStatus_t ooc_cublasSgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                                          const float* alpha, const float* A, int lda, const float* x, int incx,
                                          const float* beta, float* y, int incy) {
  if (!handle) return null_handle("ooc_cublasSgemv");
  std::string direct;  // the line oocGetLastPlanDescription gives when cuBLAS runs it itself
  bool t = false;
  const cublasStatus_t checked = guarded_cublas("ooc_cublasSgemv", [&]() -> cublasStatus_t {
    t = transposes(trans, "trans");
    if (m < 0 || n < 0)
      throw invalid_argument("m and n must be non-negative, got " + std::to_string(m) + " and " + std::to_string(n));
    check_ld("lda", lda, m);
    check_inc(incx, "incx");
    check_inc(incy, "incy");
    require_pointers({{alpha, "alpha"}, {beta, "beta"}});
    const int rows = t ? n : m;  // y's length; x has the other
    if (rows > 0) require_pointer(y, "y");
    if (rows > 0 && (t ? m : n) > 0) require_pointers({{A, "A"}, {x, "x"}});
    if (rows == 0) return CUBLAS_STATUS_SUCCESS;
    const int cols = t ? m : n;
    if (auto text = in_core("cublasSgemv", {{A, int64_t{lda} * n}, {x, span(cols, incx)}, {y, span(rows, incy)}})) {
      direct = std::move(*text);
    } else if (incx < 0 || incy < 0) {
      throw not_supported("negative incx or incy: served when A, x and y are on the device within the memory "
                          "limit (cuBLAS itself)");
    }
    return CUBLAS_STATUS_SUCCESS;
  });
  if (checked != CUBLAS_STATUS_SUCCESS || (t ? n : m) == 0) return checked;
  if (!direct.empty()) {
    const cublasStatus_t status = cublasSgemv(handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);
    if (status == CUBLAS_STATUS_SUCCESS) record_direct_call(std::move(direct));
    return status;
  }
  // y^T (1 x rows, leading dimension incy) = x^T (1 x cols, leading dimension incx) op(A)^T:
  // op(A)^T is A read with the other transposition.
  return ooc_cublasSgemm(handle, CUBLAS_OP_N, t ? CUBLAS_OP_N : CUBLAS_OP_T, 1, t ? n : m, t ? m : n, alpha, x, incx,
                         A, lda, beta, y, incy);
}
