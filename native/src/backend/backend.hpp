// The Backend interface: where chunks are stored and computed. The pipeline (exec/) drives it and
// knows nothing of CUDA. Every operation is issued on one of three in-order queues; events order
// the queues against each other and against the host. The cuda backend maps queues to streams and
// events to cudaEvents; the host backend runs each operation at once, so its events are complete
// the moment they are recorded.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/fault_injection.hpp"
#include "backend/function_ref.hpp"
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

// Tensor data crosses this interface untyped (void*): each chunk descriptor carries the dtype, and
// only a backend's kernels read elements.
// Shapes of one chunk's convolution, as the compute kernel sees it: dense x [n, c, in...],
// w [k, c, kernel...], y [n, k, out...]; padding applied by the kernel itself. The gradients use
// the same shapes: dx like x, dw like w, dy like y.
// A grouped chunk (groups > 1) is `groups` convolutions side by side: c and k count all its
// channels, w is [k, c / groups, kernel...], output channel block g reads input block g.
struct ChunkConv {
  DType dtype = DType::float32;      // of every tensor the call reads (and writes, unless out_dtype differs)
  DType out_dtype = DType::float32;  // of its output: float32 where a half call's reduction accumulates (dw, db)
  int spatial_dims = 2;
  int64_t n = 1, c = 1, k = 1, groups = 1;
  Dims3 in{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1}, out{1, 1, 1};
  MathMode math = MathMode::fp32;  // a float32 convolution's: the plan's (Plan::math)
  // How the chunk's x, w and y buffers hold their elements (ConvProblem::layout): channels-last
  // buffers are [n, in..., c], [k, kernel..., c / groups] and [n, out..., k]; bias and db are [k].
  Layout layout = Layout::channels_first;
};

// One GEMM chunk, row-major dense tiles: c[m, n] = alpha * op(a) @ op(b) + beta * c (+ bias[n]);
// a is [m, k] ([k, m] when trans_a), b is [k, n] ([n, k] when trans_b). a, b and bias have dtype,
// c has out_dtype: dtype, or float32 where a half call's K reduction spans chunks (the pipeline's
// float32 accumulator, so that splitting K rounds no partial sum to half). Products accumulate in
// float32 (cuBLAS' CUBLAS_COMPUTE_32F) or wider.
struct ChunkGemm {
  int64_t m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  DType dtype = DType::float32;
  MathMode math = MathMode::fp32;  // a float32 GEMM's: the plan's (Plan::math)
  DType out_dtype = DType::float32;
};

// One batch-norm chunk: a dense [n, c, space] tile (space: the spatial elements of one channel row).
// Its statistics and coefficients (stats, sums, mean_invstd, coef) are float32 whatever the tensors'
// dtype: the kernels accumulate and apply them in float32.
struct ChunkChannels {
  int64_t n = 1, c = 1, space = 1;
  DType dtype = DType::float32;
};

// Where an operation is issued: its name (in error messages), the fault site it counts against
// (ooc::testing::inject_fault) and the queue it runs on.
struct OpSite {
  const char* name;
  FaultSite fault;
  Queue queue;
};

// In rmm's style (device_memory_resource: public allocate calls private do_allocate): every
// operation that issues device work is a public non-virtual method that hands its private pure
// virtual do_<name> to issue(), the one place where a backend wraps all of its operations (the cuda
// backend: device scope, fault injection, queue timing). A backend implements every do_<name>; the
// base class implements nothing else, so no operation can silently fall back to another's code.
class Backend {
 public:
  using Event = int;
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual MachineModel machine() const = 0;
  // The host CPUs near the device (its NUMA node's), where the machine tells; empty: unknown (the
  // host backend's virtual devices, a GPU whose node sysfs does not give).
  virtual std::vector<int> near_cpus() const = 0;
  // Device bytes a call may use when the caller asked for none.
  virtual size_t default_memory_limit() const = 0;
  // Part of `budget` that convolution algorithms may use as workspace.
  virtual size_t workspace_allowance(size_t budget) const = 0;
  // The most workspace a convolution plan may take once its buffers are placed: the allowance
  // grows into what they leave of the budget, up to this (faster algorithms need more).
  virtual size_t workspace_max(size_t budget) const = 0;
  // Workspace that backward-filter's fast algorithm needs per byte of the x chunk (0: none).
  virtual double filter_workspace_per_x_byte() const = 0;

  // Device memory (the pipeline allocates one arena per call) and host staging memory.
  virtual void* device_alloc(size_t bytes) = 0;
  virtual void device_free(void* ptr) noexcept = 0;
  virtual void* staging_alloc(size_t bytes) = 0;
  virtual void staging_free(void* ptr) noexcept = 0;

  // Contiguous copies, issued on Queue::h2d / Queue::d2h.
  void copy_h2d(void* device_dst, const void* host_src, size_t bytes) {
    issue({"copy_h2d", FaultSite::copy, Queue::h2d}, [&] { do_copy_h2d(device_dst, host_src, bytes); });
  }
  void copy_d2h(void* host_dst, const void* device_src, size_t bytes) {
    issue({"copy_d2h", FaultSite::copy, Queue::d2h}, [&] { do_copy_d2h(host_dst, device_src, bytes); });
  }

  // On Queue::compute: y = alpha * conv(x, w) + beta * y, then y += bias[k] when bias is not null.
  // beta == 0 never reads y. workspace has workspace_bytes bytes (<= the plan's allowance).
  void conv_forward(const ChunkConv& shape, const void* x, const void* w, const void* bias, void* y, double alpha,
                    double beta, void* workspace, size_t workspace_bytes) {
    issue({"conv_forward", FaultSite::conv, Queue::compute},
          [&] { do_conv_forward(shape, x, w, bias, y, alpha, beta, workspace, workspace_bytes); });
  }
  // On Queue::compute, the gradients (cuDNN's BackwardData / BackwardFilter / BackwardBias):
  //   dx = alpha * conv_transpose(dy, w) + beta * dx
  //   dw = alpha * sum over n, out of dy[n, k, out] * x[n, c, window of out] + beta * dw
  //   db = alpha * sum over n, out of dy[n, k, out] + beta * db   (db: shape.k elements)
  // beta == 0 never reads the output; workspace as for conv_forward.
  void conv_backward_data(const ChunkConv& shape, const void* dy, const void* w, void* dx, double alpha,
                          double beta, void* workspace, size_t workspace_bytes) {
    issue({"conv_backward_data", FaultSite::conv, Queue::compute},
          [&] { do_conv_backward_data(shape, dy, w, dx, alpha, beta, workspace, workspace_bytes); });
  }
  void conv_backward_filter(const ChunkConv& shape, const void* x, const void* dy, void* dw, double alpha,
                            double beta, void* workspace, size_t workspace_bytes) {
    issue({"conv_backward_filter", FaultSite::conv, Queue::compute},
          [&] { do_conv_backward_filter(shape, x, dy, dw, alpha, beta, workspace, workspace_bytes); });
  }
  void conv_backward_bias(const ChunkConv& shape, const void* dy, void* db, double alpha, double beta) {
    issue({"conv_backward_bias", FaultSite::conv, Queue::compute},
          [&] { do_conv_backward_bias(shape, dy, db, alpha, beta); });
  }

  // On Queue::compute, the layers of layers.hpp.
  // workspace: workspace_bytes of device memory the GEMM library may use (none when 0).
  void gemm(const ChunkGemm& shape, const void* a, const void* b, const void* bias, void* c, double alpha,
            double beta, void* workspace, size_t workspace_bytes) {
    issue({"gemm", FaultSite::gemm, Queue::compute},
          [&] { do_gemm(shape, a, b, bias, c, alpha, beta, workspace, workspace_bytes); });
  }
  // Per channel of x's tile: stats[2 * ch] = mean, stats[2 * ch + 1] = M2 (sum of squared deviations).
  void channel_moments(const ChunkChannels& shape, const void* x, double* stats) {
    issue({"channel_moments", FaultSite::batchnorm, Queue::compute}, [&] { do_channel_moments(shape, x, stats); });
  }
  // Per channel: sums[2 * ch] = sum(dy), sums[2 * ch + 1] = sum(dy * (x - mean) * invstd), with
  // mean_invstd[2 * ch] = mean, mean_invstd[2 * ch + 1] = invstd.
  void channel_grad_sums(const ChunkChannels& shape, const void* x, const void* dy, const float* mean_invstd,
                         double* sums) {
    issue({"channel_grad_sums", FaultSite::batchnorm, Queue::compute},
          [&] { do_channel_grad_sums(shape, x, dy, mean_invstd, sums); });
  }
  // Per channel affine map, blended into y: dy == null: y = x * coef[2ch] + coef[2ch+1] + beta * y;
  // else y = x * coef[3ch] + dy * coef[3ch+1] + coef[3ch+2] + beta * y. beta == 0 never reads y.
  void channel_affine(const ChunkChannels& shape, const void* x, const void* dy, const float* coef, double beta,
                      void* y) {
    issue({"channel_affine", FaultSite::batchnorm, Queue::compute},
          [&] { do_channel_affine(shape, x, dy, coef, beta, y); });
  }
  // On Queue::compute, the layers of layers.hpp over dense chunks [n, c, in...] (shape.k unused),
  // each blending its result r into its output as cuDNN does: out = alpha * r + beta * out (beta == 0
  // never reads out):
  //   activation: r = f(x); backward r = f'(x) * dy from y, dy and x
  //   softmax: over c per (n, position) or over c*space per n (instance); log: log-softmax
  //   add_tensor: out = alpha * a + beta * (b ? b : out), a shaped a_shape (dims 1 or out's)
  void activation_forward(const ChunkConv& shape, ActivationMode mode, double coef, const void* x, void* y,
                          double alpha, double beta) {
    issue({"activation_forward", FaultSite::activation, Queue::compute},
          [&] { do_activation_forward(shape, mode, coef, x, y, alpha, beta); });
  }
  void activation_backward(const ChunkConv& shape, ActivationMode mode, double coef, const void* y, const void* dy,
                           const void* x, void* dx, double alpha, double beta) {
    issue({"activation_backward", FaultSite::activation, Queue::compute},
          [&] { do_activation_backward(shape, mode, coef, y, dy, x, dx, alpha, beta); });
  }
  void softmax_forward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* x, void* y, double alpha,
                       double beta) {
    issue({"softmax_forward", FaultSite::softmax, Queue::compute},
          [&] { do_softmax_forward(shape, mode, log, x, y, alpha, beta); });
  }
  void softmax_backward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* y, const void* dy,
                        void* dx, double alpha, double beta) {
    issue({"softmax_backward", FaultSite::softmax, Queue::compute},
          [&] { do_softmax_backward(shape, mode, log, y, dy, dx, alpha, beta); });
  }
  // pooling: r over shape.out from x over shape.in with shape's kernel, stride and symmetric padding
  void pool_forward(const ChunkConv& shape, PoolMode mode, const void* x, void* y, double alpha, double beta) {
    issue({"pool_forward", FaultSite::pool, Queue::compute},
          [&] { do_pool_forward(shape, mode, x, y, alpha, beta); });
  }
  //   pool backward: r over shape.in from y, dy over shape.out and x over shape.in
  void pool_backward(const ChunkConv& shape, PoolMode mode, const void* y, const void* dy, const void* x, void* dx,
                     double alpha, double beta) {
    issue({"pool_backward", FaultSite::pool, Queue::compute},
          [&] { do_pool_backward(shape, mode, y, dy, x, dx, alpha, beta); });
  }
  void add_tensor(const ChunkConv& a_shape, const ChunkConv& out_shape, double alpha, const void* a, double beta,
                  const void* b, void* out) {
    issue({"add_tensor", FaultSite::add, Queue::compute},
          [&] { do_add_tensor(a_shape, out_shape, alpha, a, beta, b, out); });
  }

  // On Queue::compute, between device buffers: a strided copy and zeroing. The fused functions
  // carry partial results in them from one chunk to a later one. Zeroing no bytes issues nothing.
  void copy_on_device(const StridedCopy& copy) {
    issue({"copy_on_device", FaultSite::device_copy, Queue::compute}, [&] { do_copy_on_device(copy); });
  }
  void zero_on_device(void* device_dst, size_t bytes) {
    if (bytes == 0) return;
    issue({"zero_on_device", FaultSite::device_copy, Queue::compute}, [&] { do_zero_on_device(device_dst, bytes); });
  }
  // On Queue::compute: dst[i] = src[i] for `count` dense elements, converted from `from` to `to`
  // (rounding to nearest even; element_access.hpp), src and dst not overlapping. A half GEMM
  // carries its split K reduction in a float32 buffer and converts it at the ends of the reduction.
  void convert_on_device(const void* src, DType from, void* dst, DType to, int64_t count) {
    if (count == 0) return;
    issue({"convert_on_device", FaultSite::device_copy, Queue::compute},
          [&] { do_convert_on_device(src, from, dst, to, count); });
  }

  // Direct DMA between caller memory and device slots, without staging. Only used when
  // host_is_device_accessible(ptr) (pinned or registered memory).
  virtual bool host_is_device_accessible(const void* ptr) = 0;
  void copy_h2d_strided(const StridedCopy& copy) {
    issue({"copy_h2d_strided", FaultSite::copy, Queue::h2d}, [&] { do_copy_h2d_strided(copy); });
  }
  void copy_d2h_strided(const StridedCopy& copy) {
    issue({"copy_d2h_strided", FaultSite::copy, Queue::d2h}, [&] { do_copy_d2h_strided(copy); });
  }
  // On Queue::h2d: zeroes a device range (halo outside the tensor, when DMA'd directly). Memory
  // work within the device, so it counts as a device_copy, not as a copy over the link.
  void zero_device(void* device_dst, size_t bytes) {
    if (bytes == 0) return;
    issue({"zero_device", FaultSite::device_copy, Queue::h2d}, [&] { do_zero_device(device_dst, bytes); });
  }

  virtual Event create_event() = 0;
  virtual void destroy_event(Event event) noexcept = 0;
  virtual void record(Event event, Queue queue) = 0;   // event completes when queue's work so far is done
  virtual void wait(Queue queue, Event event) = 0;     // queue's later work waits for event
  virtual void host_wait(Event event) = 0;             // the calling thread waits for event
  virtual bool query(Event event) = 0;                 // true when event has completed
  virtual void synchronize() noexcept = 0;             // drain every queue (also on error paths)

  // Device time each queue (h2d, compute, d2h) spent busy since start_queue_timing(), read after
  // synchronize(); negative where the backend does not measure it (cuda: OOC_PROFILE_QUEUES=1).
  virtual void start_queue_timing() = 0;
  virtual std::array<double, 3> queue_busy_seconds() = 0;

 private:
  // Runs `work`, the do_<name> of the operation `op` names, with what every operation of this
  // backend needs around it. Called once per operation, on the pipeline's hot path: FunctionRef,
  // so nothing is allocated or copied.
  virtual void issue(const OpSite& op, FunctionRef<void()> work) = 0;

  // The operations themselves, as the public methods of the same name document them.
  virtual void do_copy_h2d(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void do_copy_d2h(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void do_conv_forward(const ChunkConv& shape, const void* x, const void* w, const void* bias, void* y,
                               double alpha, double beta, void* workspace, size_t workspace_bytes) = 0;
  virtual void do_conv_backward_data(const ChunkConv& shape, const void* dy, const void* w, void* dx, double alpha,
                                     double beta, void* workspace, size_t workspace_bytes) = 0;
  virtual void do_conv_backward_filter(const ChunkConv& shape, const void* x, const void* dy, void* dw,
                                       double alpha, double beta, void* workspace, size_t workspace_bytes) = 0;
  virtual void do_conv_backward_bias(const ChunkConv& shape, const void* dy, void* db, double alpha,
                                     double beta) = 0;
  virtual void do_gemm(const ChunkGemm& shape, const void* a, const void* b, const void* bias, void* c,
                       double alpha, double beta, void* workspace, size_t workspace_bytes) = 0;
  virtual void do_channel_moments(const ChunkChannels& shape, const void* x, double* stats) = 0;
  virtual void do_channel_grad_sums(const ChunkChannels& shape, const void* x, const void* dy,
                                    const float* mean_invstd, double* sums) = 0;
  virtual void do_channel_affine(const ChunkChannels& shape, const void* x, const void* dy, const float* coef,
                                 double beta, void* y) = 0;
  virtual void do_activation_forward(const ChunkConv& shape, ActivationMode mode, double coef, const void* x,
                                     void* y, double alpha, double beta) = 0;
  virtual void do_activation_backward(const ChunkConv& shape, ActivationMode mode, double coef, const void* y,
                                      const void* dy, const void* x, void* dx, double alpha, double beta) = 0;
  virtual void do_softmax_forward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* x, void* y,
                                  double alpha, double beta) = 0;
  virtual void do_softmax_backward(const ChunkConv& shape, SoftmaxMode mode, bool log, const void* y,
                                   const void* dy, void* dx, double alpha, double beta) = 0;
  virtual void do_pool_forward(const ChunkConv& shape, PoolMode mode, const void* x, void* y, double alpha,
                               double beta) = 0;
  virtual void do_pool_backward(const ChunkConv& shape, PoolMode mode, const void* y, const void* dy,
                                const void* x, void* dx, double alpha, double beta) = 0;
  virtual void do_add_tensor(const ChunkConv& a_shape, const ChunkConv& out_shape, double alpha, const void* a,
                             double beta, const void* b, void* out) = 0;
  virtual void do_copy_on_device(const StridedCopy& copy) = 0;
  virtual void do_zero_on_device(void* device_dst, size_t bytes) = 0;
  virtual void do_convert_on_device(const void* src, DType from, void* dst, DType to, int64_t count) = 0;
  virtual void do_copy_h2d_strided(const StridedCopy& copy) = 0;
  virtual void do_copy_d2h_strided(const StridedCopy& copy) = 0;
  virtual void do_zero_device(void* device_dst, size_t bytes) = 0;
};

// Makes the backend options ask for (automatic: cuda when a GPU is present).
std::unique_ptr<Backend> make_backend(const Options& options);
std::unique_ptr<Backend> make_host_backend();
// Test hooks of the host backend (ooc::testing in ooc.hpp): treat all caller memory as pinned; honour
// armed faults (fault_injection.hpp).
void set_host_backend_direct_access(bool enabled);
void set_host_backend_fault_injection(bool enabled);
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace ooc
