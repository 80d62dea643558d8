// train_cnn [steps]: trains small_cnn.hpp's CNN on synthetic images through libooc's C API, on a GPU
// made small so that the activations live in host memory and the layers run in chunks. Prints the
// first step's convolution plan, what each call of the first step ran, and the loss as it falls.
// Exits 0 when the loss over the last steps is below half the first one (and the convolution was
// really split), 1 otherwise or when any call fails.
#include <algorithm>
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

// The step time against the two references a user compares with: the link roofline of the bytes
// the step's chunked calls moved (each direction at its measured pinned bandwidth, and both at
// once at the bidirectional one: the slowest of the three bounds), and the same training with every
// tensor on the device and no memory limit, where every ooc_ call is plain cuDNN or cuBLAS.
// Figures only: speed is judged by benchmarks, not by this program's exit status.
void report_speed(const TrainResult& r, cudnnHandle_t cudnn, cublasHandle_t cublas, TrainOptions options) {
  double h2d = 0, d2h = 0, bidir = 0;
  CHECK(oocMeasureLinkBandwidth(&h2d, &d2h, &bidir));
  const oocTotals_t& t = r.timed_totals;
  const double in = static_cast<double>(t.bytesH2D) / r.timed_steps;
  const double out = static_cast<double>(t.bytesD2H) / r.timed_steps;
  const double roofline = std::max({in / h2d, out / d2h, (in + out) / bidir});
  oocSetDeviceAllocationLimit(static_cast<size_t>(-1));
  oocSetMemoryLimit(0);
  options.print_every = 0;
  const TrainResult plain = train_small_cnn(cudnn, cublas, options);
  std::printf("speed: %.3f ms per step out of core (%lld calls, %lld chunked in %lld chunks, %.1f KiB in and "
              "%.1f KiB out per step)\n",
              1e3 * r.seconds_per_step, t.calls / r.timed_steps, t.outOfCoreCalls / r.timed_steps,
              t.chunks / r.timed_steps, in / 1024, out / 1024);
  // Where the step's time goes: the chunked runs themselves (oocTotals_t::seconds), the host's data,
  // and the rest (the direct calls, planning and each call's fixed cost).
  const double chunked = t.seconds / r.timed_steps;
  // Inside the chunked runs, the issuing thread's waits for the device (oocTotals_t::paceWaitSeconds):
  // a large share means the device (or the link) bounds the chunks, a small one that issuing does.
  std::printf("speed: of it %.3f ms in the chunked runs (%.3f ms of them waiting for the device), %.3f ms "
              "drawing the batch, %.3f ms elsewhere (direct calls, planning, per-call costs); plain: %.3f ms "
              "drawing the batch\n",
              1e3 * chunked, 1e3 * t.paceWaitSeconds / r.timed_steps, 1e3 * r.data_seconds_per_step,
              1e3 * (r.seconds_per_step - chunked - r.data_seconds_per_step), 1e3 * plain.data_seconds_per_step);
  std::printf("speed: link roofline %.3f ms per step (%.1f / %.1f / %.1f GB/s h2d / d2h / both): %.2f of it\n",
              1e3 * roofline, h2d / 1e9, d2h / 1e9, bidir / 1e9, roofline / r.seconds_per_step);
  std::printf("speed: plain cuDNN with every tensor on the device %.3f ms per step (%lld of %lld calls chunked): "
              "out of core is %.2fx\n",
              1e3 * plain.seconds_per_step, plain.timed_totals.outOfCoreCalls, plain.timed_totals.calls,
              r.seconds_per_step / plain.seconds_per_step);
}

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
  report_speed(r, cudnn.get(), cublas.get(), options);
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
