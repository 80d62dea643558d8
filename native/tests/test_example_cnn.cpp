// The example program's training (examples/small_cnn.cpp) without a GPU: under the host-backend
// test switch every ooc_ call it makes runs its out-of-core path on the CPU within train_cnn's memory
// limit, ooc_cudaMalloc gives host memory, and the loss must fall as train_cnn demands.
#include <gtest/gtest.h>

#include <string>

#include "capi_fixtures.hpp"
#include "small_cnn.hpp"

namespace {

using ooc_test::dummy_handle;

class ExampleCnn : public ooc_test::HostBackendTest {};

constexpr size_t kMemoryLimit = size_t{1} << 20;  // train_cnn's

TEST_F(ExampleCnn, LossFallsWithTheConvolutionSplit) {
  oocSetMemoryLimit(kMemoryLimit);
  TrainOptions options;
  options.print_every = 20;  // also runs the printing of the first step's plans
  const TrainResult r = train_small_cnn(dummy_handle<cudnnHandle_t>(), dummy_handle<cublasHandle_t>(), options);
  EXPECT_EQ(r.first_conv_forward.outOfCore, 1);
  EXPECT_GT(r.first_conv_forward.chunks, 1);
  EXPECT_LE(r.first_conv_forward.peakDeviceBytes, kMemoryLimit);
  EXPECT_NEAR(r.first_loss, 1.386f, 0.3f);  // about ln 4: four classes, no knowledge yet
  EXPECT_LT(r.final_loss, 0.5f * r.first_loss);
  EXPECT_GT(r.final_accuracy, 0.8f);
}

TEST_F(ExampleCnn, AFailingCallThrowsNamingItAndWhy) {
  oocSetMemoryLimit(64);  // no plan fits, not even the first call's (the convolution)
  TrainOptions options;
  options.print_every = 0;
  try {
    train_small_cnn(dummy_handle<cudnnHandle_t>(), dummy_handle<cublasHandle_t>(), options);
    FAIL() << "trained within a 64-byte memory limit";
  } catch (const ApiError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ooc_cudnnConvolutionForward"), std::string::npos) << what;
    // cudnnGetErrorString's name for CUDNN_STATUS_ALLOC_FAILED (cuDNN 9: ..._HOST_ALLOCATION_FAILED).
    EXPECT_NE(what.find(cudnnGetErrorString(CUDNN_STATUS_ALLOC_FAILED)), std::string::npos) << what;
    EXPECT_NE(what.find("memory_limit of 64 B is too small"), std::string::npos) << what;  // libooc's reason
  }
}

TEST_F(ExampleCnn, BadOptionsAreRejected) {
  TrainOptions options;
  options.steps = options.average_over - 1;
  EXPECT_THROW(train_small_cnn(dummy_handle<cudnnHandle_t>(), dummy_handle<cublasHandle_t>(), options),
               std::invalid_argument);
  options = TrainOptions{};
  options.image = 31;
  EXPECT_THROW(train_small_cnn(dummy_handle<cudnnHandle_t>(), dummy_handle<cublasHandle_t>(), options),
               std::invalid_argument);
}

}  // namespace
