// train_cnn [steps]: trains small_cnn.hpp's CNN on synthetic images through libooc's C API, on a GPU
// made small so that the activations live in host memory and the layers run in chunks. Prints the
// first step's convolution plan, what each call of the first step ran, and the loss as it falls.
// Exits 0 when the loss over the last steps is below half the first one (and the convolution was
// really split), 1 otherwise or when any call fails.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <type_traits>

#include "small_cnn.hpp"

namespace {

// Device bytes ooc_cudaMalloc may hand out: the parameters, their gradients, the input batch and
// the logits fit (about 0.4 MiB); the activations (1-4 MiB each) then land in pinned host memory.
constexpr size_t kDeviceAllocationLimit = size_t{1} << 20;
// Device bytes one out-of-core call may use: the 4 MiB convolution output is streamed in chunks.
constexpr size_t kMemoryLimit = size_t{1} << 20;

struct CudnnDestroyer {
  void operator()(cudnnHandle_t h) const { (void)cudnnDestroy(h); }
};
struct CublasDestroyer {
  void operator()(cublasHandle_t h) const { (void)cublasDestroy(h); }
};

int run(int steps) {
  oocSetDeviceAllocationLimit(kDeviceAllocationLimit);
  oocSetMemoryLimit(kMemoryLimit);

  cudnnHandle_t cudnn_handle = nullptr;
  CHECK(cudnnCreate(&cudnn_handle));
  const std::unique_ptr<std::remove_pointer_t<cudnnHandle_t>, CudnnDestroyer> cudnn(cudnn_handle);
  cublasHandle_t cublas_handle = nullptr;
  CHECK(cublasCreate(&cublas_handle));
  const std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDestroyer> cublas(cublas_handle);

  TrainOptions options;
  options.steps = steps;
  std::printf("train_cnn: batch %d of 1x%dx%d, conv 3x3 to %d channels, %d steps, learning rate %g;\n"
              "device allocations capped at %zu KiB, %zu KiB per out-of-core call\n",
              options.batch, options.image, options.image, options.channels, options.steps, options.learning_rate,
              kDeviceAllocationLimit >> 10, kMemoryLimit >> 10);
  const TrainResult r = train_small_cnn(cudnn.get(), cublas.get(), options);

  std::printf("first loss %.4f, last %d steps: loss %.4f, accuracy %.1f%%\n", r.first_loss, options.average_over,
              r.final_loss, 100.0 * r.final_accuracy);
  if (!r.first_conv_forward.outOfCore || r.first_conv_forward.chunks < 2) {
    std::fprintf(stderr, "train_cnn: FAILED: the convolution ran in %lld chunk(s), not split out of core\n",
                 r.first_conv_forward.chunks);
    return 1;
  }
  if (!(r.final_loss < 0.5f * r.first_loss)) {
    std::fprintf(stderr, "train_cnn: FAILED: the loss did not fall below half its first value (%.4f -> %.4f)\n",
                 r.first_loss, r.final_loss);
    return 1;
  }
  std::printf("train_cnn: ok (loss fell from %.4f to %.4f)\n", r.first_loss, r.final_loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = TrainOptions{}.steps;
  if (argc > 2 || (argc == 2 && (steps = std::atoi(argv[1])) < TrainOptions{}.average_over)) {
    std::fprintf(stderr, "usage: %s [steps, at least %d]\n", argv[0], TrainOptions{}.average_over);
    return 2;
  }
  try {
    return run(steps);
  } catch (const std::exception& e) {  // ApiError from CHECK: the call and libooc's reason
    std::fprintf(stderr, "train_cnn: %s\n", e.what());
    return 1;
  }
}
