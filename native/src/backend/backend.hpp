// The Backend interface: where chunks are stored and computed. The pipeline (exec/) drives it and
// knows nothing of CUDA. Every operation is issued on one of three in-order queues; events order
// the queues against each other and against the host. The cuda backend maps queues to streams and
// events to cudaEvents; the host backend runs each operation at once, so its events are complete
// the moment they are recorded.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "ooc/plan.hpp"
#include "ooc/types.hpp"

namespace ooc {

enum class Queue { h2d = 0, compute = 1, d2h = 2 };

// One rectangular copy of up to three dimensions between a host tensor and a dense device slot, in
// bytes (cudaMemcpy3D's model): depth slices of height rows of width_bytes each.
struct StridedCopy {
  const char* src = nullptr;
  char* dst = nullptr;
  size_t width_bytes = 0, height = 1, depth = 1;
  size_t src_pitch = 0, src_slice = 0, dst_pitch = 0, dst_slice = 0;
};

// Shapes of one chunk's convolution, as the compute kernel sees it: dense x [n, c, in...],
// w [k, c, kernel...], y [n, k, out...]; padding applied by the kernel itself. The gradients use
// the same shapes: dx like x, dw like w, dy like y.
struct ChunkConv {
  int spatial_dims = 2;
  int64_t n = 1, c = 1, k = 1;
  Dims3 in{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1}, out{1, 1, 1};
};

// One GEMM chunk, row-major dense tiles: c[m, n] = alpha * op(a) @ op(b) + beta * c (+ bias[n]);
// a is [m, k] ([k, m] when trans_a), b is [k, n] ([n, k] when trans_b).
struct ChunkGemm {
  int64_t m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
};

// One batch-norm chunk: a dense [n, c, space] tile (space: the spatial elements of one channel row).
struct ChunkChannels {
  int64_t n = 1, c = 1, space = 1;
};

class Backend {
 public:
  using Event = int;
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual MachineModel machine() const = 0;
  // Device bytes a call may use when the caller asked for none.
  virtual size_t default_memory_limit() const = 0;
  // Part of `budget` that convolution algorithms may use as workspace.
  virtual size_t workspace_allowance(size_t budget) const = 0;
  // The most workspace a convolution plan may take once its buffers are placed: the allowance
  // grows into what they leave of the budget, up to this (faster algorithms need more).
  virtual size_t workspace_max(size_t budget) const { return workspace_allowance(budget); }
  // Workspace that backward-filter's fast algorithm needs per byte of the x chunk (0: none).
  virtual double filter_workspace_per_x_byte() const { return 0; }

  // Device memory (the pipeline allocates one arena per call) and host staging memory.
  virtual void* device_alloc(size_t bytes) = 0;
  virtual void device_free(void* ptr) noexcept = 0;
  virtual void* staging_alloc(size_t bytes) = 0;
  virtual void staging_free(void* ptr) noexcept = 0;

  // Contiguous copies, issued on Queue::h2d / Queue::d2h.
  virtual void copy_h2d(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_d2h(void* host_dst, const void* device_src, size_t bytes) = 0;

  // On Queue::compute: y = alpha * conv(x, w) + beta * y, then y += bias[k] when bias is not null.
  // beta == 0 never reads y. workspace has workspace_bytes bytes (<= the plan's allowance).
  virtual void conv_forward(const ChunkConv& shape, const float* x, const float* w, const float* bias, float* y,
                            double alpha, double beta, void* workspace, size_t workspace_bytes) = 0;
  // On Queue::compute, the gradients (cuDNN's BackwardData / BackwardFilter / BackwardBias):
  //   dx = alpha * conv_transpose(dy, w) + beta * dx
  //   dw = alpha * sum over n, out of dy[n, k, out] * x[n, c, window of out] + beta * dw
  //   db = alpha * sum over n, out of dy[n, k, out] + beta * db   (db: shape.k elements)
  // beta == 0 never reads the output; workspace as for conv_forward.
  virtual void conv_backward_data(const ChunkConv& shape, const float* dy, const float* w, float* dx, double alpha,
                                  double beta, void* workspace, size_t workspace_bytes) = 0;
  virtual void conv_backward_filter(const ChunkConv& shape, const float* x, const float* dy, float* dw, double alpha,
                                    double beta, void* workspace, size_t workspace_bytes) = 0;
  virtual void conv_backward_bias(const ChunkConv& shape, const float* dy, float* db, double alpha, double beta) = 0;

  // On Queue::compute, the layers of layers.hpp (defaults throw: a backend without them).
  // workspace: workspace_bytes of device memory the GEMM library may use (none when 0).
  virtual void gemm(const ChunkGemm& shape, const float* a, const float* b, const float* bias, float* c, double alpha,
                    double beta, void* workspace, size_t workspace_bytes) {
    (void)shape; (void)a; (void)b; (void)bias; (void)c; (void)alpha; (void)beta; (void)workspace;
    (void)workspace_bytes;
    throw std::logic_error(name() + " backend has no gemm");
  }
  // Per channel of x's tile: stats[2 * ch] = mean, stats[2 * ch + 1] = M2 (sum of squared deviations).
  virtual void channel_moments(const ChunkChannels& shape, const float* x, float* stats) {
    (void)shape; (void)x; (void)stats;
    throw std::logic_error(name() + " backend has no batch norm");
  }
  // Per channel: sums[2 * ch] = sum(dy), sums[2 * ch + 1] = sum(dy * (x - mean) * invstd), with
  // mean_invstd[2 * ch] = mean, mean_invstd[2 * ch + 1] = invstd.
  virtual void channel_grad_sums(const ChunkChannels& shape, const float* x, const float* dy, const float* mean_invstd,
                                 float* sums) {
    (void)shape; (void)x; (void)dy; (void)mean_invstd; (void)sums;
    throw std::logic_error(name() + " backend has no batch norm");
  }
  // Per channel affine map, blended into y: dy == null: y = x * coef[2ch] + coef[2ch+1] + beta * y;
  // else y = x * coef[3ch] + dy * coef[3ch+1] + coef[3ch+2] + beta * y. beta == 0 never reads y.
  virtual void channel_affine(const ChunkChannels& shape, const float* x, const float* dy, const float* coef,
                              double beta, float* y) {
    (void)shape; (void)x; (void)dy; (void)coef; (void)beta; (void)y;
    throw std::logic_error(name() + " backend has no batch norm");
  }
  // On Queue::compute, the layers of layers.hpp over dense chunks [n, c, in...] (shape.k unused),
  // each blending its result r into its output as cuDNN does: out = alpha * r + beta * out (beta == 0
  // never reads out):
  //   activation: r = f(x); backward r = f'(x) * dy from y, dy and x
  //   softmax: over c per (n, position) or over c*space per n (instance); log: log-softmax
  //   add_tensor: out = alpha * a + beta * (b ? b : out), a shaped a_shape (dims 1 or out's)
  // The defaults (host/host_layers.cpp) are the reference loops over host-addressable slots, which
  // is what the host backend uses; the cuda backend overrides them with cuDNN.
  virtual void activation_forward(const ChunkConv& shape, ActivationMode mode, double coef, const float* x, float* y,
                                  double alpha, double beta);
  virtual void activation_backward(const ChunkConv& shape, ActivationMode mode, double coef, const float* y,
                                   const float* dy, const float* x, float* dx, double alpha, double beta);
  virtual void softmax_forward(const ChunkConv& shape, SoftmaxMode mode, bool log, const float* x, float* y,
                               double alpha, double beta);
  virtual void softmax_backward(const ChunkConv& shape, SoftmaxMode mode, bool log, const float* y, const float* dy,
                                float* dx, double alpha, double beta);
  // pooling: r over shape.out from x over shape.in with shape's kernel, stride and symmetric padding
  virtual void pool_forward(const ChunkConv& shape, PoolMode mode, const float* x, float* y, double alpha,
                            double beta);
  //   pool backward: r over shape.in from y, dy over shape.out and x over shape.in
  virtual void pool_backward(const ChunkConv& shape, PoolMode mode, const float* y, const float* dy, const float* x,
                             float* dx, double alpha, double beta);
  virtual void add_tensor(const ChunkConv& a_shape, const ChunkConv& out_shape, double alpha, const float* a,
                          double beta, const float* b, float* out);

  // On Queue::compute, between device buffers: a strided copy and zeroing. The fused functions
  // carry partial results in them from one chunk to a later one.
  virtual void copy_on_device(const StridedCopy& copy) { (void)copy; throw std::logic_error(name() + " backend has no device copies"); }
  virtual void zero_on_device(void* device_dst, size_t bytes) {
    (void)device_dst; (void)bytes;
    throw std::logic_error(name() + " backend has no device copies");
  }

  // Direct DMA between caller memory and device slots, without staging. Only used when
  // host_is_device_accessible(ptr) (pinned or registered memory).
  virtual bool host_is_device_accessible(const void* ptr) { (void)ptr; return false; }
  virtual void copy_h2d_strided(const StridedCopy& copy) { (void)copy; throw std::logic_error("no direct DMA"); }
  virtual void copy_d2h_strided(const StridedCopy& copy) { (void)copy; throw std::logic_error("no direct DMA"); }
  // On Queue::h2d: zeroes a device range (halo outside the tensor, when DMA'd directly).
  virtual void zero_device(void* device_dst, size_t bytes) { (void)device_dst; (void)bytes; throw std::logic_error("no direct DMA"); }

  virtual Event create_event() = 0;
  virtual void destroy_event(Event event) noexcept = 0;
  virtual void record(Event event, Queue queue) = 0;   // event completes when queue's work so far is done
  virtual void wait(Queue queue, Event event) = 0;     // queue's later work waits for event
  virtual void host_wait(Event event) = 0;             // the calling thread waits for event
  virtual bool query(Event event) = 0;                 // true when event has completed
  virtual void synchronize() noexcept = 0;

  // Device time each queue (h2d, compute, d2h) spent busy since start_queue_timing(), read after
  // synchronize(); negative where the backend does not measure it (cuda: OOC_PROFILE_QUEUES=1).
  virtual void start_queue_timing() {}
  virtual std::array<double, 3> queue_busy_seconds() { return {-1.0, -1.0, -1.0}; }             // drain every queue (also on error paths)
};

// Makes the backend options ask for (automatic: cuda when a GPU is present).
std::unique_ptr<Backend> make_backend(const Options& options);
std::unique_ptr<Backend> make_host_backend();
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace ooc
