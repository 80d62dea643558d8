// The cuBLAS level-1/2 look-alikes and the stream-ordered memory calls on a GPU: each against
// plain cuBLAS on device copies, with the vectors in device, pinned, pageable and mixed memory,
// whole and split into chunks by a small memory limit. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "capi_gpu_fixtures.hpp"
#include "conv_run.hpp"
#include "ooc/ooc_cublas.h"

namespace {

using namespace ooc_test;

constexpr int kN = 5003;             // odd: uneven last chunk
constexpr size_t kSplitLimit = 4096;  // 4 KiB of device buffers: hundreds of elements per chunk

class CapiBlasVectorsGpu : public CapiGpuTest {
 protected:
  void SetUp() override {
    CapiGpuTest::SetUp();
    exact_direct_ = false;  // dot-like reductions may differ in the last bit between cuBLAS runs
  }
  std::mt19937 rng{test_seed(73)};
  float alpha = -0.75f, beta = 0.5f;
};

TEST_P(CapiBlasVectorsGpu, AxpyScalCopy) {
  for (const auto& [incx, incy] : {std::pair{1, 1}, {2, 3}, {-2, 1}}) {
    SCOPED_TRACE("incx " + std::to_string(incx) + ", incy " + std::to_string(incy));
    const size_t nx = static_cast<size_t>((kN - 1) * std::abs(incx) + 1);
    const size_t ny = static_cast<size_t>((kN - 1) * std::abs(incy) + 1);
    const std::vector<float> x = random_vector(nx, rng), y = random_vector(ny, rng);
    compare_with_library({x, y}, {1}, kSplitLimit, [&](bool use_ooc, const std::vector<void*>& t) {
      auto fn = use_ooc ? ooc_cublasSaxpy : cublasSaxpy;
      return fn(cublas_, kN, &alpha, static_cast<const float*>(t[0]), incx, static_cast<float*>(t[1]), incy);
    });
    compare_with_library({x}, {0}, kSplitLimit, [&](bool use_ooc, const std::vector<void*>& t) {
      auto fn = use_ooc ? ooc_cublasSscal : cublasSscal;
      return fn(cublas_, kN, &alpha, static_cast<float*>(t[0]), incx);
    });
    compare_with_library({x, y}, {1}, kSplitLimit, [&](bool use_ooc, const std::vector<void*>& t) {
      auto fn = use_ooc ? ooc_cublasScopy : cublasScopy;
      return fn(cublas_, kN, static_cast<const float*>(t[0]), incx, static_cast<float*>(t[1]), incy);
    });
  }
}

TEST_P(CapiBlasVectorsGpu, DotAndNrm2) {
  const std::vector<float> x = random_vector(2 * kN, rng), y = random_vector(kN, rng);
  float want_dot = 0, want_norm = 0;
  {
    Buffer dx(Memory::device, x), dy(Memory::device, y);
    ASSERT_EQ(cublasSdot(cublas_, kN, static_cast<const float*>(dx.get()), 2, static_cast<const float*>(dy.get()), 1,
                         &want_dot),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSnrm2(cublas_, kN, static_cast<const float*>(dx.get()), 2, &want_norm), CUBLAS_STATUS_SUCCESS);
  }
  const GpuCase c = GetParam();
  Buffer bx(memory_of(c.memory, 0), x), by(memory_of(c.memory, 1), y);
  oocSetMemoryLimit(c.split ? kSplitLimit : 0);
  float dot = NAN, norm = NAN;
  ASSERT_EQ(ooc_cublasSdot(cublas_, kN, static_cast<const float*>(bx.get()), 2, static_cast<const float*>(by.get()), 1,
                           &dot),
            CUBLAS_STATUS_SUCCESS)
      << last_error();
  ASSERT_EQ(ooc_cublasSnrm2(cublas_, kN, static_cast<const float*>(bx.get()), 2, &norm), CUBLAS_STATUS_SUCCESS)
      << last_error();
  oocPlanInfo_t info{};
  ASSERT_EQ(oocGetLastPlanInfo(&info), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(info.outOfCore, c.memory == Memory::device && !c.split ? 0 : 1) << last_plan();
  if (c.split) {
    EXPECT_GT(info.chunks, 1) << last_plan();
  }
  EXPECT_NEAR(dot, want_dot, 1e-5f * want_norm * std::sqrt(static_cast<float>(kN)));
  EXPECT_NEAR(norm, want_norm, 1e-5f * want_norm);
}

TEST_P(CapiBlasVectorsGpu, DevicePointerModeResult) {
  const std::vector<float> x = random_vector(kN, rng);
  Buffer result(Memory::device, {0.0f}), bx(memory_of(GetParam().memory, 0), x);
  oocSetMemoryLimit(GetParam().split ? kSplitLimit : 0);
  ASSERT_EQ(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  const cublasStatus_t status =
      ooc_cublasSnrm2(cublas_, kN, static_cast<const float*>(bx.get()), 1, static_cast<float*>(result.get()));
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  ASSERT_EQ(cublasGetPointerMode(cublas_, &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_POINTER_MODE_DEVICE);  // the caller's mode is restored
  ASSERT_EQ(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(status, CUBLAS_STATUS_SUCCESS) << last_error();
  double squares = 0;
  for (float v : x) squares += double{v} * v;
  EXPECT_NEAR(result.read()[0], std::sqrt(squares), 1e-5 * std::sqrt(squares));
}

TEST_P(CapiBlasVectorsGpu, Gemv) {
  const int m = 301, n = 257, lda = 305;
  const std::vector<float> A = random_vector(static_cast<size_t>(lda) * n, rng);
  for (cublasOperation_t trans : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (const auto& [incx, incy] : {std::pair{1, 1}, {3, 2}}) {
      SCOPED_TRACE("trans " + std::to_string(trans) + ", incx " + std::to_string(incx));
      const bool t = trans != CUBLAS_OP_N;
      const int rows = t ? n : m, cols = t ? m : n;
      const std::vector<float> x = random_vector(static_cast<size_t>((cols - 1) * incx + 1), rng);
      const std::vector<float> y = random_vector(static_cast<size_t>((rows - 1) * incy + 1), rng);
      compare_with_library({A, x, y}, {2}, 64 << 10, [&](bool use_ooc, const std::vector<void*>& p) {
        auto fn = use_ooc ? ooc_cublasSgemv : cublasSgemv;
        return fn(cublas_, trans, m, n, &alpha, static_cast<const float*>(p[0]), lda,
                  static_cast<const float*>(p[1]), incx, &beta, static_cast<float*>(p[2]), incy);
      });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Memory, CapiBlasVectorsGpu, gpu_cases(), case_name);

class CapiAsyncMemoryGpu : public GpuTest<> {
 protected:
  void TearDown() override { oocSetDeviceAllocationLimit(static_cast<size_t>(-1)); }
};

// On one stream: a device buffer set, copied into an ooc_cudaMalloc'd buffer placed in pinned host
// memory, part of that set by a host function, then copied to pageable memory: each step sees the
// one before it.
TEST_F(CapiAsyncMemoryGpu, CopiesAndSetsAreStreamOrderedOverEveryKindOfMemory) {
  const size_t bytes = 8 << 20;
  void* device = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(ooc_cudaMalloc(&device, bytes), cudaSuccess) << last_error();
  oocSetDeviceAllocationLimit(0);  // the next allocation lands in pinned host memory
  ASSERT_EQ(ooc_cudaMalloc(&pinned, bytes), cudaSuccess) << last_error();
  ASSERT_TRUE(ooc::is_device_memory(device));
  ASSERT_FALSE(ooc::is_device_memory(pinned));
  std::vector<unsigned char> pageable(bytes, 0);
  const cudaStream_t stream = nullptr;
  ASSERT_EQ(ooc_cudaMemsetAsync(device, 0x5a, bytes, stream), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemcpyAsync(pinned, device, bytes, cudaMemcpyDeviceToDevice, stream), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemsetAsync(static_cast<char*>(pinned) + bytes / 2, 0x11, bytes / 2, stream), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemcpyAsync(pageable.data(), pinned, bytes, cudaMemcpyDefault, stream), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemcpy(pageable.data(), pageable.data(), 0, cudaMemcpyHostToHost), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemcpyAsync(device, pageable.data(), 1, cudaMemcpyHostToDevice, stream), cudaSuccess);
  unsigned char first = 0;
  ASSERT_EQ(ooc_cudaMemcpy(&first, device, 1, cudaMemcpyDeviceToHost), cudaSuccess);  // after the stream's work
  EXPECT_EQ(first, 0x5a);
  for (size_t i = 0; i < bytes; i += 4099) ASSERT_EQ(pageable[i], i < bytes / 2 ? 0x5a : 0x11) << i;
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(ooc_cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  EXPECT_GT(free_bytes, 0u);
  EXPECT_LE(free_bytes, total_bytes);
  EXPECT_EQ(ooc_cudaFree(pinned), cudaSuccess);
  EXPECT_EQ(ooc_cudaFree(device), cudaSuccess);
  void* host = nullptr;
  ASSERT_EQ(ooc_cudaMallocHost(&host, 4096), cudaSuccess);
  EXPECT_TRUE(ooc::is_device_accessible(host));
  EXPECT_FALSE(ooc::is_device_memory(host));
  EXPECT_EQ(ooc_cudaFreeHost(host), cudaSuccess);
}

}  // namespace
