// A small CNN trained through libooc's C API the way a cuDNN program is written: cuDNN descriptors,
// then cuDNN's and cuBLAS' compute calls with the ooc_ prefix on buffers from ooc_cudaMalloc
// (device memory while there is room, then pinned host memory). Any of those buffers may be in
// host memory: each ooc_ call runs on the GPU in chunks that fit the memory limit when they are.
//
//   x [N,1,S,S] -> conv 3x3 (C channels, padding 1) + bias -> relu -> 2x2 max pool -> fully
//   connected (4 classes, ooc_cublasSgemm) + bias -> log-softmax -> cross-entropy
//
// trained with plain SGD on synthetic images whose class is the quadrant holding a bright blob.
// train_cnn.cpp is the program; native/tests/test_example_cnn.cpp runs the same training on the
// host backend in CI.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <stdexcept>

#include "ooc/ooc_cublas.h"

struct TrainOptions {
  int batch = 64;      // images per step
  int image = 32;      // height and width of the one-channel images (even)
  int channels = 16;   // conv output channels
  int steps = 60;
  int average_over = 10;  // steps the final loss and accuracy are averaged over
  float learning_rate = 0.1f;
  unsigned seed = 7;      // data and initial weights: the same run every time
  int print_every = 5;    // 0: print nothing
};

struct TrainResult {
  float first_loss = 0;     // the first batch's, before any update
  float final_loss = 0;     // mean over the last average_over steps
  float final_accuracy = 0;
  oocPlanInfo_t first_conv_forward{};  // what the first step's convolution ran
  // The steps after the first (which plans every call): their mean wall time and what their ooc_
  // calls did in all (oocGetTotals).
  double seconds_per_step = 0;
  double data_seconds_per_step = 0;  // of it, drawing the synthetic batch on the host
  int timed_steps = 0;
  oocTotals_t timed_totals{};
};

// Thrown by CHECK: the failing call and why (libooc's reason for an ooc_ call).
class ApiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ApiError naming `call` unless `status` is success.
void check(cudnnStatus_t status, const char* call);
void check(cublasStatus_t status, const char* call);
void check(cudaError_t status, const char* call);
#define CHECK(call) check((call), #call)

// Trains a fresh network with the caller's handles (their stream: the default one). Every buffer is
// freed again, also when a call fails (ApiError).
TrainResult train_small_cnn(cudnnHandle_t cudnn, cublasHandle_t cublas, const TrainOptions& options);
