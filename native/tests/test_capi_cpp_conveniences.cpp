// A C++ CUDA program switches to pyooc by the prefix alone: with cuda_runtime.h included (its
// template<class T> cudaMalloc(T**, size_t) and cudaMallocHost overloads), the ooc_ forms take
// typed pointers too; the stream-ordered copies and sets, page-locked allocations and the memory
// report work as the program expects. Runs on the host backend (no GPU needed).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "capi_fixtures.hpp"
#include "ooc/ooc_cudnn.h"

namespace {

using namespace ooc_test;

class CapiCppConveniences : public HostBackendTest {};

TEST_F(CapiCppConveniences, TypedPointersAllocateAndCopyAsWithTheCudaRuntime) {
  float* weights = nullptr;  // as real programs write it: no cast to void**
  double* staging = nullptr;
  ASSERT_EQ(ooc_cudaMalloc(&weights, 256 * sizeof(float)), cudaSuccess) << last_error();
  ASSERT_EQ(ooc_cudaMallocHost(&staging, 128 * sizeof(double)), cudaSuccess) << last_error();
  ASSERT_NE(weights, nullptr);
  ASSERT_NE(staging, nullptr);
  for (int i = 0; i < 128; ++i) staging[i] = i;
  const cudaStream_t stream = nullptr;
  ASSERT_EQ(ooc_cudaMemsetAsync(weights, 0, 256 * sizeof(float), stream), cudaSuccess);
  ASSERT_EQ(ooc_cudaMemcpyAsync(weights, staging, 64 * sizeof(double), cudaMemcpyHostToDevice, stream), cudaSuccess);
  double back[128];
  std::memset(back, 0xff, sizeof back);
  ASSERT_EQ(ooc_cudaMemcpyAsync(back, weights, sizeof back, cudaMemcpyDefault, stream), cudaSuccess);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(back[i], i);
  for (int i = 64; i < 128; ++i) EXPECT_EQ(back[i], 0.0);  // the memset's zeros past the copy
  EXPECT_EQ(ooc_cudaMemcpyAsync(back, weights, 8, static_cast<cudaMemcpyKind>(9), stream),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(ooc_cudaMemsetAsync(nullptr, 0, 8, stream), cudaErrorInvalidValue);
  EXPECT_EQ(ooc_cudaMemcpyAsync(nullptr, back, 8, cudaMemcpyDefault, stream), cudaErrorInvalidValue);
  EXPECT_EQ(ooc_cudaMemcpyAsync(nullptr, nullptr, 0, cudaMemcpyDefault, stream), cudaSuccess);
  EXPECT_EQ(ooc_cudaFreeHost(staging), cudaSuccess);
  EXPECT_EQ(ooc_cudaFree(weights), cudaSuccess);
  EXPECT_EQ(ooc_cudaMallocHost(nullptr, 16), cudaErrorInvalidValue);
  void* none = reinterpret_cast<void*>(1);
  EXPECT_EQ(ooc_cudaMallocHost(&none, 0), cudaSuccess);
  EXPECT_EQ(none, nullptr);
}

TEST_F(CapiCppConveniences, MemGetInfoTellsWhatAllocationsCanStillGet) {
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(ooc_cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess) << last_error();
  EXPECT_GT(total_bytes, 0u);
  EXPECT_GT(free_bytes, 0u);
  EXPECT_LE(free_bytes, total_bytes);
  EXPECT_EQ(ooc_cudaMemGetInfo(nullptr, &total_bytes), cudaSuccess);
  EXPECT_EQ(ooc_cudaMemGetInfo(&free_bytes, nullptr), cudaSuccess);
}

}  // namespace
