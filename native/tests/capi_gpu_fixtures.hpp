// The GPU tests of the C API: caller tensors in device, pinned or pageable memory (or a mix), and
// one comparison of an ooc_ call against the plain cuDNN or cuBLAS call on device copies of the same
// inputs, with no memory limit (device memory: the library is called directly, so results are
// identical) and with a limit that forces a split (chunked; FP32 either way, so they agree to fp32
// rounding). Tests skip without a GPU.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/pointer_kind.hpp"
#include "capi_fixtures.hpp"

namespace ooc_test {

// mixed: the tensors of one call cycle through device, pinned and pageable memory.
enum class Memory { device, pinned, pageable, mixed };

inline const char* memory_name(Memory m) {
  switch (m) {
    case Memory::device: return "device";
    case Memory::pinned: return "pinned";
    case Memory::pageable: return "pageable";
    default: return "mixed";
  }
}

// The memory of a call's tensor `index`.
inline Memory memory_of(Memory m, size_t index) {
  return m == Memory::mixed ? static_cast<Memory>(index % 3) : m;
}

// One tensor in caller memory of kind `memory` (not mixed). Copies go through ooc_cudaMemcpy, which
// takes any kind (and the test binary has no CUDA runtime of its own: libooc links it statically).
class Buffer {
 public:
  Buffer(Memory memory, const std::vector<float>& contents) : memory_(memory), count_(contents.size()) {
    const size_t bytes = count_ * sizeof(float);
    if (memory == Memory::pageable) {
      host_.resize(count_);
      data_ = host_.data();
    } else {
      // ooc_cudaMalloc places device memory first, pinned host once the device cap is reached.
      oocSetDeviceAllocationLimit(memory == Memory::device ? static_cast<size_t>(-1) : 0);
      EXPECT_EQ(ooc_cudaMalloc(&data_, bytes), cudaSuccess) << last_error();
      oocSetDeviceAllocationLimit(static_cast<size_t>(-1));
      EXPECT_EQ(ooc::is_device_memory(data_), memory == Memory::device);
      EXPECT_TRUE(ooc::is_device_accessible(data_));
    }
    EXPECT_EQ(ooc_cudaMemcpy(data_, contents.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess) << last_error();
  }
  ~Buffer() {
    if (memory_ != Memory::pageable) {
      EXPECT_EQ(ooc_cudaFree(data_), cudaSuccess) << last_error();
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return data_; }
  std::vector<float> read() const {
    std::vector<float> v(count_);
    EXPECT_EQ(ooc_cudaMemcpy(v.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  Memory memory_;
  size_t count_;
  std::vector<float> host_;
  void* data_ = nullptr;
};

struct GpuCase {
  Memory memory;
  bool split;  // a memory limit that forces chunks; else none (device memory: the library directly)
};

inline std::string case_name(const ::testing::TestParamInfo<GpuCase>& info) {
  return std::string(memory_name(info.param.memory)) + (info.param.split ? "_split" : "_whole");
}

// Device, pinned, pageable and mixed memory, each whole and split.
inline auto gpu_cases() {
  return ::testing::Values(GpuCase{Memory::device, false}, GpuCase{Memory::device, true},
                           GpuCase{Memory::pinned, false}, GpuCase{Memory::pinned, true},
                           GpuCase{Memory::pageable, false}, GpuCase{Memory::pageable, true},
                           GpuCase{Memory::mixed, true});
}

// A GPU test with a cuBLAS handle of its own (skips without a GPU); clears the memory limit after.
class CublasGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cublasCreate(&cublas_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    oocSetMemoryLimit(0);
    if (cublas_) EXPECT_EQ(cublasDestroy(cublas_), CUBLAS_STATUS_SUCCESS);
  }
  cublasHandle_t cublas_ = nullptr;
};

class CapiGpuTest : public ::testing::TestWithParam<GpuCase> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudnnCreate(&handle_), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cublasCreate(&cublas_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(ooc_cudaMalloc(&workspace_, kWorkspace), cudaSuccess);
    ASSERT_TRUE(ooc::is_device_memory(workspace_));
  }
  void TearDown() override {
    oocSetMemoryLimit(0);
    if (workspace_) ooc_cudaFree(workspace_);
    if (cublas_) cublasDestroy(cublas_);
    if (handle_) cudnnDestroy(handle_);
  }

  // call(use_ooc, data) runs the plain library call (use_ooc false) or its ooc_ twin on the
  // tensors `data`, returning its status (0: success, in cuDNN's and cuBLAS' codes alike). The
  // plain call runs first on device copies; then the ooc_ call on the case's memory, and the
  // tensors at `outputs` must match.
  template <typename Call>
  void compare_with_library(const std::vector<std::vector<float>>& tensors, const std::vector<size_t>& outputs,
                            size_t split_limit, const Call& call) {
    const GpuCase c = GetParam();
    std::vector<std::vector<float>> want;
    {
      std::vector<std::unique_ptr<Buffer>> buffers;
      std::vector<void*> data;
      for (const auto& t : tensors) {
        buffers.push_back(std::make_unique<Buffer>(Memory::device, t));
        data.push_back(buffers.back()->get());
      }
      ASSERT_EQ(static_cast<int>(call(false, data)), 0);
      for (size_t o : outputs) want.push_back(buffers[o]->read());  // synchronous: after the handle's work
    }
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<void*> data;
    for (size_t i = 0; i < tensors.size(); ++i) {
      buffers.push_back(std::make_unique<Buffer>(memory_of(c.memory, i), tensors[i]));
      data.push_back(buffers.back()->get());
    }
    oocSetMemoryLimit(c.split ? split_limit : 0);
    ASSERT_EQ(static_cast<int>(call(true, data)), 0) << last_error();
    oocPlanInfo_t info{};
    ASSERT_EQ(oocGetLastPlanInfo(&info), CUDNN_STATUS_SUCCESS);
    const bool direct = !always_out_of_core_ && c.memory == Memory::device && !c.split;
    EXPECT_EQ(info.outOfCore, direct ? 0 : 1) << last_plan();
    if (c.split) {
      EXPECT_GT(info.chunks, 1) << last_plan();
      EXPECT_LE(info.peakDeviceBytes, split_limit) << last_plan();
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      SCOPED_TRACE("output tensor " + std::to_string(outputs[i]));
      const std::vector<float> got = buffers[outputs[i]]->read();  // synchronous, after the handle's work
      ASSERT_EQ(got.size(), want[i].size());
      if (direct && exact_direct_) {
        EXPECT_EQ(std::memcmp(got.data(), want[i].data(), got.size() * sizeof(float)), 0)
            << "the direct path must give the library's own result";
      } else {
        const Comparison cmp = compare(got, std::vector<double>(want[i].begin(), want[i].end()));
        EXPECT_EQ(cmp.non_finite, 0) << "first bad element " << cmp.first_bad;
        EXPECT_LE(cmp.relative_error, 1e-5) << last_plan();
      }
    }
  }

  static constexpr size_t kWorkspace = size_t{256} << 20;
  // The direct path must reproduce the reference bit for bit, unless the library call itself may
  // not (reductions by atomics); then both paths are held to fp32 rounding.
  bool exact_direct_ = true;
  // The fused entry points have no cuDNN call to hand to: they run chunked on any memory.
  bool always_out_of_core_ = false;
  cudnnHandle_t handle_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace ooc_test
