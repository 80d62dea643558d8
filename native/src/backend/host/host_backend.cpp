// The host backend: the "device" is host memory and every queue runs its work at once, in order,
// on the calling thread (compute on the worker pool). Events are therefore complete when recorded.
// It exists so that the whole planner + pipeline path runs, budget included, where no GPU is.
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/backend.hpp"
#include "backend/fault_injection.hpp"
#include "backend/host/host_channels_first.hpp"
#include "backend/host/host_conv.hpp"
#include "backend/host/host_elements.hpp"
#include "backend/host/host_layers.hpp"
#include "backend/host/host_pool_activation_softmax.hpp"
#include "util/thread_pool.hpp"

namespace ooc {
namespace {

// The test-only switches of ooc::testing (ooc.hpp), process-wide like the backend itself.
std::atomic<bool>& direct_access_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}
bool direct_access() { return direct_access_flag().load(); }

std::atomic<bool>& fault_injection_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}
bool fault_injection() { return fault_injection_flag().load(); }

class HostBackend final : public Backend {
 public:
  std::string name() const override { return "host"; }

  std::vector<int> near_cpus() const override { return {}; }  // virtual devices: nowhere in particular
  MachineModel machine() const override {
    MachineModel m;
    m.h2d_bytes_per_s = m.d2h_bytes_per_s = 8e9;  // memcpy
    m.bidir_bytes_per_s = 8e9;
    m.host_copy_bytes_per_s = 8e9;
    // Fixed, not scaled by this machine's cores: host-backend plans (and the tests that force a
    // split through them) are then the same on a 2-core CI runner and a 16-core GPU host.
    m.flops_per_s = 4e9;
    m.chunk_half_flops = 2e5;
    m.chunk_overhead_s = 5e-6;
    m.copies_share_compute = true;
    return m;
  }

  size_t default_memory_limit() const override { return size_t{1} << 30; }
  size_t workspace_allowance(size_t) const override { return 0; }  // direct loops need none
  size_t workspace_max(size_t budget) const override { return workspace_allowance(budget); }
  double filter_workspace_per_x_byte() const override { return 0; }

  void* device_alloc(size_t bytes) override { return checked_malloc(bytes); }
  void device_free(void* p) noexcept override { std::free(p); }
  void* staging_alloc(size_t bytes) override { return checked_malloc(bytes); }
  void staging_free(void* p) noexcept override { std::free(p); }

  bool host_is_device_accessible(const void*) override { return direct_access(); }

  Event create_event() override { return next_event_++; }
  void destroy_event(Event) noexcept override {}
  void record(Event, Queue) override {}
  void wait(Queue, Event) override {}
  void host_wait(Event) override {}
  bool query(Event) override { return true; }
  void synchronize() noexcept override {}

  // Nothing to measure: the queues run on the calling thread, inside the wall time.
  void start_queue_timing() override {}
  std::array<double, 3> queue_busy_seconds() override { return {-1.0, -1.0, -1.0}; }

 private:
  // Every operation runs at once on the calling thread; an armed fault fires only where a test
  // asked the host backend to honour inject_fault (set_host_fault_injection), so that arming one
  // for the cuda backend leaves host calls alone.
  void issue(const OpSite& op, FunctionRef<void()> work) override {
    if (fault_injection()) throw_if_fault_injected(op.fault, op.name);
    work();
  }

  void do_copy_h2d(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void do_copy_d2h(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  // The convolution kernels read every dtype (backend/host/host_conv.hpp); the others are float32
  // loops, refusing a chunk of another dtype.
  // Channels-last chunks run through channels-first scratch (host_channels_first.hpp); db, a
  // vector, is the same in either layout.
  void do_conv_forward(const ChunkConv& shape, const void* x, const void* w, const void* bias, void* y,
                       double alpha, double beta, void*, size_t) override {
    in_channels_first(shape.layout, {x_buffer(shape, x), w_buffer(shape, w, shape.dtype)}, y_buffer(shape, y),
                      beta != 0.0, [&](const void* const* in, void* out) {
                        host_conv_forward(shape, in[0], in[1], bias, out, alpha, beta, ThreadPool::shared());
                      });
  }
  void do_conv_backward_data(const ChunkConv& shape, const void* dy, const void* w, void* dx, double alpha,
                             double beta, void*, size_t) override {
    in_channels_first(shape.layout, {y_buffer(shape, dy), w_buffer(shape, w, shape.dtype)}, x_buffer(shape, dx),
                      beta != 0.0, [&](const void* const* in, void* out) {
                        host_conv_backward_data(shape, in[0], in[1], out, alpha, beta, ThreadPool::shared());
                      });
  }
  void do_conv_backward_filter(const ChunkConv& shape, const void* x, const void* dy, void* dw, double alpha,
                               double beta, void*, size_t) override {
    in_channels_first(shape.layout, {x_buffer(shape, x), y_buffer(shape, dy)}, w_buffer(shape, dw, shape.out_dtype),
                      beta != 0.0, [&](const void* const* in, void* out) {
                        host_conv_backward_filter(shape, in[0], in[1], out, alpha, beta, ThreadPool::shared());
                      });
  }
  void do_conv_backward_bias(const ChunkConv& shape, const void* dy, void* db, double alpha, double beta) override {
    const ChannelsBuffer vector{db, 1, 1, shape.k, shape.out_dtype};  // one channel: alike in both layouts
    in_channels_first(shape.layout, {y_buffer(shape, dy)}, vector, beta != 0.0, [&](const void* const* in, void* out) {
      host_conv_backward_bias(shape, in[0], out, alpha, beta, ThreadPool::shared());
    });
  }

  void do_gemm(const ChunkGemm& shape, const void* a, const void* b, const void* bias, void* c, double alpha,
               double beta, void*, size_t) override {
    host_gemm(shape, a, b, bias, c, alpha, beta, ThreadPool::shared());
  }
  void do_channel_moments(const ChunkChannels& shape, const void* x, double* stats) override {
    host_channel_moments(shape, x, stats, ThreadPool::shared());
  }
  void do_channel_grad_sums(const ChunkChannels& shape, const void* x, const void* dy, const float* mean_invstd,
                            double* sums) override {
    host_channel_grad_sums(shape, x, dy, mean_invstd, sums, ThreadPool::shared());
  }
  void do_channel_affine(const ChunkChannels& shape, const void* x, const void* dy, const float* coef, double beta,
                         void* y) override {
    host_channel_affine(shape, x, dy, coef, beta, y, ThreadPool::shared());
  }

  void do_activation_forward(const ChunkConv& s, ActivationMode mode, double coef, const void* x, void* y,
                             double alpha, double beta) override {
    host_activation_forward(s, mode, coef, x, y, alpha, beta, ThreadPool::shared());
  }
  void do_activation_backward(const ChunkConv& s, ActivationMode mode, double coef, const void* y, const void* dy,
                              const void* x, void* dx, double alpha, double beta) override {
    host_activation_backward(s, mode, coef, y, dy, x, dx, alpha, beta, ThreadPool::shared());
  }
  void do_softmax_forward(const ChunkConv& s, SoftmaxMode mode, bool log, const void* x, void* y, double alpha,
                          double beta) override {
    host_softmax_forward(s, mode, log, x, y, alpha, beta, ThreadPool::shared());
  }
  void do_softmax_backward(const ChunkConv& s, SoftmaxMode mode, bool log, const void* y, const void* dy,
                           void* dx, double alpha, double beta) override {
    host_softmax_backward(s, mode, log, y, dy, dx, alpha, beta, ThreadPool::shared());
  }
  void do_pool_forward(const ChunkConv& s, PoolMode mode, const void* x, void* y, double alpha,
                       double beta) override {
    in_channels_first(s.layout, {x_buffer(s, x)}, pooled_buffer(s, y), beta != 0.0,
                      [&](const void* const* in, void* out) {
                        host_pool_forward(s, mode, in[0], out, alpha, beta, ThreadPool::shared());
                      });
  }
  void do_pool_backward(const ChunkConv& s, PoolMode mode, const void* y, const void* dy, const void* x, void* dx,
                        double alpha, double beta) override {
    in_channels_first(s.layout, {pooled_buffer(s, y), pooled_buffer(s, dy), x_buffer(s, x)}, x_buffer(s, dx),
                      beta != 0.0, [&](const void* const* in, void* out) {
                        host_pool_backward(s, mode, in[0], in[1], in[2], out, alpha, beta, ThreadPool::shared());
                      });
  }
  void do_add_tensor(const ChunkConv& a_shape, const ChunkConv& out_shape, double alpha, const void* a, double beta,
                     const void* b, void* out) override {
    host_add_tensor(a_shape, out_shape, alpha, a, beta, b, out, ThreadPool::shared());
  }

  void do_copy_on_device(const StridedCopy& c) override { strided_memcpy(c); }
  void do_zero_on_device(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void do_convert_on_device(const void* src, DType from, void* dst, DType to, int64_t count) override {
    host_elements::convert(from, src, to, dst, count);
  }
  void do_copy_h2d_strided(const StridedCopy& c) override { strided_memcpy(c); }
  void do_copy_d2h_strided(const StridedCopy& c) override { strided_memcpy(c); }
  void do_zero_device(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }

  static void strided_memcpy(const StridedCopy& c) {
    for (size_t z = 0; z < c.depth; ++z)
      for (size_t y = 0; y < c.height; ++y)
        std::memcpy(c.dst + z * c.dst_slice + y * c.dst_pitch, c.src + z * c.src_slice + y * c.src_pitch,
                    c.width_bytes);
  }
  static void* checked_malloc(size_t bytes) {
    void* p = std::malloc(bytes ? bytes : 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  Event next_event_ = 0;
};

}  // namespace

void set_host_backend_direct_access(bool enabled) { direct_access_flag() = enabled; }
void set_host_backend_fault_injection(bool enabled) { fault_injection_flag() = enabled; }

std::unique_ptr<Backend> make_host_backend() { return std::make_unique<HostBackend>(); }

}  // namespace ooc
