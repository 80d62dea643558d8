// The cuda backend: queues are non-blocking streams, events are cudaEvents, chunks run through
// cuDNN's legacy convolution API (forward, backward data, filter and bias) in full FP32, staging
// buffers come from a page-locked cache. Every operation passes through issue() (device scope,
// fault injection, queue timing) into its do_<name>, which only issues the work.
// One object per device, made once per process and used by one call at a time (api/ooc.cpp).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/conv_setup_cache.hpp"
#include "backend/cuda/cublas_gemm.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_machine_model.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/depthwise_kernels.hpp"
#include "backend/cuda/cudnn_layers.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "backend/cuda/device_scope.hpp"
#include "backend/cuda/event_pool.hpp"
#include "backend/cuda/layer_kernels.hpp"
#include "backend/cuda/pinned_pool.hpp"
#include "backend/cuda/pointer_kind.hpp"
#include "backend/cuda/queue_timer.hpp"
#include "backend/cuda/strided_copy.hpp"
#include "backend/depthwise_wgrad.hpp"
#include "backend/fault_injection.hpp"
#include "backend/float32_kernels.hpp"
#include "plan/layout_copies.hpp"
#include "util/numa_placement.hpp"

namespace ooc {
namespace {

using float32_kernels::f;
template <typename ChunkShape>
void float32_kernel(const ChunkShape& shape, const char* op) {
  float32_kernels::require(shape, "cuda", op);
}

constexpr size_t kGiB = size_t{1} << 30;
// Pinned staging kept between calls; beyond this the memory goes back to the system.
constexpr size_t kStagingCacheBytes = 4 * kGiB;

// Everything the backend owns on its device. Members are destroyed in reverse order: the staging
// cache and descriptors first, then the cuDNN handle, events, and the streams the handle used.
struct DeviceResources {
  CudaStream h2d, compute, d2h;
  EventPool events;
  CudnnHandle cudnn;
  CublasGemm blas;
  cuda_kernels::ReductionScratch reduction_scratch;
  ConvSetupCache conv_setups;
  PinnedPool staging{kStagingCacheBytes};
};

// Whether the environment variable `name` is set to `value` (the backend's switches, read once).
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

// A chunk's tensors' element counts: x [n, c, in] (a layer chunk's dense tile too),
// w [k, c / groups, kernel], y [n, k, out].
int64_t x_elements(const ChunkConv& s) { return s.n * s.c * s.in[0] * s.in[1] * s.in[2]; }
int64_t w_elements(const ChunkConv& s) { return s.k * (s.c / s.groups) * s.kernel[0] * s.kernel[1] * s.kernel[2]; }
int64_t y_elements(const ChunkConv& s) { return s.n * s.k * s.out[0] * s.out[1] * s.out[2]; }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device), machine_(cuda_machine_model_from_env()) {
    DeviceScope scope(device_);
    // A local until the end, so that a throw below releases it while our device is still current.
    auto resources = std::make_unique<DeviceResources>();
    int max_pitch = 0;
    OOC_CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device_));
    max_pitch_ = static_cast<size_t>(max_pitch);
    char bus_id[32] = {};
    OOC_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_));
    near_cpus_ = cpus_near_pci_device(bus_id);
    resources_ = std::move(resources);
  }

  ~CudaBackend() override {
    DeviceScope scope(device_, std::nothrow);
    if (!scope.ok()) {
      // The CUDA runtime is already torn down (static destruction at exit): tearing our objects
      // down through it could crash, and the driver reclaims them with the process anyway.
      (void)resources_.release();
      return;
    }
    synchronize();
    resources_.reset();
  }

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  MachineModel machine() const override { return machine_; }
  std::vector<int> near_cpus() const override { return near_cpus_; }
  // Measured at each call: other libraries (torch, cupy) may have taken memory since we started.
  size_t default_memory_limit() const override {
    DeviceScope scope(device_);
    size_t free_bytes = 0, total_bytes = 0;
    OOC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return free_bytes / 5 * 4;
  }

  // The rules live in cuda_machine_model.hpp, where plan_* applies them for an absent GPU too.
  size_t workspace_allowance(size_t budget) const override { return cuda_workspace::allowance(budget); }
  double filter_workspace_per_x_byte() const override { return cuda_workspace::kFilterPerXByte; }
  size_t workspace_max(size_t budget) const override { return cuda_workspace::max(budget); }

  void* device_alloc(size_t bytes) override {
    if (bytes == 0) return nullptr;
    DeviceScope scope(device_);
    void* ptr = nullptr;
    OOC_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    return ptr;
  }

  void device_free(void* ptr) noexcept override {
    if (!ptr) return;
    DeviceScope scope(device_, std::nothrow);
    cuda_detail::ignore_cuda_error(cudaFree(ptr));
  }

  void* staging_alloc(size_t bytes) override {
    DeviceScope scope(device_);
    return resources_->staging.allocate(bytes);
  }

  void staging_free(void* ptr) noexcept override {
    DeviceScope scope(device_, std::nothrow);
    resources_->staging.release(ptr);
  }

  // Pinned or registered host memory (and device or managed memory, which must never be read by
  // host workers) goes by DMA straight between the caller's tensor and the device slots.
  bool host_is_device_accessible(const void* ptr) override { return is_device_accessible(ptr); }

  Event create_event() override {
    DeviceScope scope(device_);
    return resources_->events.acquire();
  }

  void destroy_event(Event event) noexcept override { resources_->events.release(event); }

  void record(Event event, Queue queue) override {
    DeviceScope scope(device_);
    OOC_CUDA_CHECK(cudaEventRecord(resources_->events.at(event), stream_of(queue)));
  }

  void wait(Queue queue, Event event) override {
    DeviceScope scope(device_);
    OOC_CUDA_CHECK(cudaStreamWaitEvent(stream_of(queue), resources_->events.at(event), 0));
  }

  void host_wait(Event event) override {
    DeviceScope scope(device_);
    OOC_CUDA_CHECK(cudaEventSynchronize(resources_->events.at(event)));
  }

  bool query(Event event) override {
    DeviceScope scope(device_);
    const cudaError_t status = cudaEventQuery(resources_->events.at(event));
    if (status == cudaSuccess) return true;
    if (status == cudaErrorNotReady) {
      cuda_detail::clear_last_cuda_error();  // "not yet" is an answer, not an error
      return false;
    }
    cuda_detail::throw_cuda_error(status, "cudaEventQuery(event)", __FILE__, __LINE__);
  }

  void start_queue_timing() override { queue_timer_.start(); }
  std::array<double, 3> queue_busy_seconds() override {
    DeviceScope scope(device_);
    return queue_timer_.busy_seconds();
  }

  void synchronize() noexcept override {
    DeviceScope scope(device_, std::nothrow);
    if (!scope.ok() || !resources_) return;
    for (const CudaStream* stream : {&resources_->h2d, &resources_->compute, &resources_->d2h})
      cuda_detail::ignore_cuda_error(cudaStreamSynchronize(stream->get()));
  }

 private:
  // What every operation needs around it, once: our device current (the caller's restored after),
  // the armed fault for its site, and its queue's timing span around the work it issues.
  void issue(const OpSite& op, FunctionRef<void()> work) override {
    DeviceScope scope(device_);
    throw_if_fault_injected(op.fault, op.name);
    QueueTimer::Span span = timed(op.queue);
    work();
  }

  // cudaMemcpyDefault: the "host" side may be a caller's device array (the Python API's device
  // arrays, the C API's device pointers), which an explicit host kind would misdescribe.
  void do_copy_h2d(void* device_dst, const void* host_src, size_t bytes) override {
    OOC_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyDefault, resources_->h2d.get()));
  }

  void do_copy_d2h(void* host_dst, const void* device_src, size_t bytes) override {
    OOC_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDefault, resources_->d2h.get()));
  }

  // The convolutions: cuDNN's legacy API with the cached setup of each chunk shape (conv_setup_cache.hpp),
  // in the chunk's dtype (half and bfloat16 computed in float32 by cuDNN). A chunk whose output
  // accumulates in float32 while its inputs are half (dw, db of a half call) is not served yet.
  static void require_one_dtype(const ChunkConv& shape, const char* op) {
    if (shape.out_dtype != shape.dtype)
      throw not_supported(std::string("cuda backend: ") + op + " of " + dtype_name(shape.dtype) +
                          " inputs into a float32 accumulator is not supported yet (the host backend serves it)");
  }

  void do_conv_forward(const ChunkConv& shape, const void* x, const void* w, const void* bias, void* y, double alpha,
                       double beta, void* workspace, size_t workspace_bytes) override {
    require_one_dtype(shape, "conv_forward");
    ConvSetup& setup = convolve_in_layout(Operation::forward, shape, x, w, y, alpha, beta, workspace, workspace_bytes);
    if (bias) {
      const float one = 1.0f;
      OOC_CUDNN_CHECK(cudnnAddTensor(resources_->cudnn, &one, setup.bias, bias, &one, setup.y, y));
    }
  }

  void do_conv_backward_data(const ChunkConv& shape, const void* dy, const void* w, void* dx, double alpha,
                             double beta, void* workspace, size_t workspace_bytes) override {
    require_one_dtype(shape, "conv_backward_data");
    convolve_in_layout(Operation::backward_data, shape, dy, w, dx, alpha, beta, workspace, workspace_bytes);
  }

  void do_conv_backward_filter(const ChunkConv& shape, const void* x, const void* dy, void* dw, double alpha,
                               double beta, void* workspace, size_t workspace_bytes) override {
    if (own_depthwise_wgrad_ && depthwise::serves(shape)) {
      cuda_kernels::depthwise_backward_filter(shape, x, dy, static_cast<float*>(dw), static_cast<float>(alpha),
                                              static_cast<float>(beta), resources_->reduction_scratch,
                                              resources_->compute.get());
      return;
    }
    convolve_in_layout(Operation::backward_filter, shape, x, dy, dw, alpha, beta, workspace, workspace_bytes);
  }

  // One convolution chunk, in1 and in2 into out in the backend's argument order: forward (x, w, y),
  // backward data (dy, w, dx), backward filter (x, dy, dw). A chunk that needs channels-first
  // staging (plan/layout_copies.hpp) keeps the room the planner reserved for it at the workspace's
  // tail; it runs in its own layout until cuDNN refuses that shape, then on channels-first copies.
  ConvSetup& convolve_in_layout(Operation op, const ChunkConv& shape, const void* in1, const void* in2, void* out,
                                double alpha, double beta, void* workspace, size_t workspace_bytes) {
    resources_->conv_setups.trim();
    if (layout_copies(true, op, shape.layout, shape.spatial_dims, shape.dtype) != LayoutCopies::channels_first_staging)
      return convolve_natively(op, shape, in1, in2, out, alpha, beta, workspace, workspace_bytes);
    const ChunkCopies copies(shape);
    if (copies.bytes > workspace_bytes)
      throw std::logic_error(std::string("cuda backend: a channels-last 3-D ") + operation_name(op) +
                             " chunk was planned without room for its channels-first copies");
    const size_t algorithm_bytes = workspace_bytes - copies.bytes;
    char* room = static_cast<char*>(workspace) + algorithm_bytes;
    if (!resources_->conv_setups.refuses_layout(shape, op)) {
      try {
        return convolve_natively(op, shape, in1, in2, out, alpha, beta, workspace, algorithm_bytes);
      } catch (const cudnn_error& e) {
        if (e.status() != CUDNN_STATUS_NOT_SUPPORTED) throw;
        resources_->conv_setups.refuse_layout(shape, op);  // every algorithm refused: staged from now on
      }
    }
    return convolve_channels_first(op, shape, copies, room, in1, in2, out, alpha, beta, workspace, algorithm_bytes);
  }

  // Where a staged chunk's channels-first copies of x, w and y lie in the room (each 256-aligned,
  // layout_copy_bytes' arrangement).
  struct ChunkCopies {
    size_t x = 0, w = 0, y = 0, bytes = 0;  // offsets of w and y, the total
    explicit ChunkCopies(const ChunkConv& s) {
      w = layout_copy_bytes(x_elements(s), 0, 0, s.dtype);
      y = w + layout_copy_bytes(0, w_elements(s), 0, s.dtype);
      bytes = layout_copy_bytes(x_elements(s), w_elements(s), y_elements(s), s.dtype);
    }
  };

  // The chunk on channels-first copies: its inputs transformed into the room, the convolution there
  // (beta 0), its output transformed back with beta. The same transform turns a half dw into the
  // float32 accumulator (ConvProblem::output_dtype). Exact: transforms only move (and widen) elements.
  ConvSetup& convolve_channels_first(Operation op, const ChunkConv& shape, const ChunkCopies& copies, char* room,
                                     const void* in1, const void* in2, void* out, double alpha, double beta,
                                     void* workspace, size_t algorithm_bytes) {
    ChunkConv planar = shape;
    planar.layout = Layout::channels_first;
    planar.out_dtype = shape.dtype;
    // The chunk's own descriptors (x, y and w as a tensor in its layout) and the planar ones.
    ConvSetup& own = setup_for(shape, op, workspace, algorithm_bytes);
    ConvSetup& flat = setup_for(planar, op, workspace, algorithm_bytes);
    enum Role { kX, kW, kY };
    const std::array<Role, 3> roles = op == Operation::forward         ? std::array<Role, 3>{kX, kW, kY}
                                      : op == Operation::backward_data ? std::array<Role, 3>{kY, kW, kX}
                                                                       : std::array<Role, 3>{kX, kY, kW};
    auto desc = [](ConvSetup& s, Role r) -> cudnnTensorDescriptor_t {
      return r == kX ? s.x : r == kY ? s.y : s.w_tensor;
    };
    auto copy = [&](Role r) -> void* { return room + (r == kX ? 0 : r == kW ? copies.w : copies.y); };
    const float one = 1.0f, zero = 0.0f, beta_f = static_cast<float>(beta);
    cudnnHandle_t handle = resources_->cudnn;
    for (int i : {0, 1})
      OOC_CUDNN_CHECK(cudnnTransformTensor(handle, &one, desc(own, roles[i]), i == 0 ? in1 : in2, &zero,
                                           desc(flat, roles[i]), copy(roles[i])));
    convolve_natively(op, planar, copy(roles[0]), copy(roles[1]), copy(roles[2]), alpha, 0.0, workspace,
                      algorithm_bytes);
    cudnnTensorDescriptor_t out_desc = shape.out_dtype != shape.dtype ? own.w_accumulator : desc(own, roles[2]);
    OOC_CUDNN_CHECK(cudnnTransformTensor(handle, &one, desc(flat, roles[2]), copy(roles[2]), &beta_f, out_desc, out));
    return own;
  }

  // The chunk in its own layout. Half inputs into a float32 dw (ConvProblem::output_dtype): cuDNN
  // computes this chunk's dw in the inputs' dtype into the workspace's tail, which the planner
  // reserved for it (backward_planner.cpp), and cudnnTransformTensor adds it in float32:
  // dw = alpha * partial + beta * dw. Each chunk's partial is rounded to half once; the sum over
  // chunks is float32.
  ConvSetup& convolve_natively(Operation op, const ChunkConv& shape, const void* in1, const void* in2, void* out,
                               double alpha, double beta, void* workspace, size_t workspace_bytes) {
    if (op != Operation::backward_filter || shape.out_dtype == shape.dtype)
      return run_conv(op, shape, in1, in2, out, alpha, beta, workspace, workspace_bytes);
    const size_t partial_bytes = half_partial_bytes(shape);
    if (partial_bytes > workspace_bytes)
      throw std::logic_error("cuda backend: a half-precision backward filter chunk has no workspace for its partial dw");
    void* partial = static_cast<char*>(workspace) + (workspace_bytes - partial_bytes);
    ConvSetup& setup = run_conv(op, shape, in1, in2, partial, 1.0, 0.0, workspace, workspace_bytes - partial_bytes);
    const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    OOC_CUDNN_CHECK(cudnnTransformTensor(resources_->cudnn, &alpha_f, setup.w_tensor, partial, &beta_f,
                                         setup.w_accumulator, out));
    return setup;
  }

  // The bytes of a half-precision chunk's partial dw ([k, c / groups, kernel...], 256-aligned).
  static size_t half_partial_bytes(const ChunkConv& s) {
    return (static_cast<size_t>(w_elements(s)) * dtype_size(s.dtype) + 255) / 256 * 256;
  }

  // cuDNN's call of one convolution operation on a setup, in the backend's argument order.
  cudnnStatus_t convolve(Operation op, const ConvSetup& s, const float* alpha, const float* beta, void* ws,
                         const void* in1, const void* in2, void* out) {
    cudnnHandle_t h = resources_->cudnn;
    switch (op) {
      case Operation::forward:
        return cudnnConvolutionForward(h, alpha, s.x, in1, s.w, in2, s.conv, s.algorithm, ws, s.workspace_bytes, beta,
                                       s.y, out);
      case Operation::backward_data:
        return cudnnConvolutionBackwardData(h, alpha, s.w, in2, s.y, in1, s.conv, s.data_algorithm, ws,
                                            s.workspace_bytes, beta, s.x, out);
      case Operation::backward_filter:
        return cudnnConvolutionBackwardFilter(h, alpha, s.x, in1, s.y, in2, s.conv, s.filter_algorithm, ws,
                                              s.workspace_bytes, beta, s.w, out);
      default: throw std::logic_error(std::string("cuda backend: ") + operation_name(op) + " is not a convolution");
    }
  }

  static const char* cudnn_call_name(Operation op) {
    return op == Operation::forward         ? "cudnnConvolutionForward"
           : op == Operation::backward_data ? "cudnnConvolutionBackwardData"
                                            : "cudnnConvolutionBackwardFilter";
  }

  void do_conv_backward_bias(const ChunkConv& shape, const void* dy_data, void* db_data, double alpha,
                             double beta) override {
    if (shape.dtype != DType::float32) {
      // A half dy into a float32 db (ChunkConv::out_dtype): our own reduction, summing in float64.
      // cuDNN's BackwardBias documents dy and db of one data type, so it would round db to half.
      const ChunkChannels sums{shape.n, shape.k, shape.out[0] * shape.out[1] * shape.out[2], shape.dtype};
      if (shape.out_dtype != DType::float32)
        throw std::logic_error("conv_backward_bias: a half dy's db accumulates in float32 (ChunkConv::out_dtype)");
      double* scratch = resources_->reduction_scratch.get(cuda_kernels::reduction_scratch_bytes(sums));
      cuda_kernels::channel_sum(sums, dy_data, static_cast<float>(alpha), static_cast<float>(beta),
                                static_cast<float*>(db_data), scratch, resources_->compute.get());
      return;
    }
    const float* dy = f(dy_data);
    float* db = f(db_data);
    resources_->conv_setups.trim();
    ConvSetup& setup = setup_for(shape, Operation::backward_bias, nullptr, 0);
    const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    OOC_CUDNN_CHECK(cudnnConvolutionBackwardBias(resources_->cudnn, &alpha_f, setup.y, dy, &beta_f, setup.bias, db));
  }

  void do_gemm(const ChunkGemm& shape, const void* a_data, const void* b_data, const void* bias_data, void* c_data,
               double alpha, double beta, void* workspace, size_t workspace_bytes) override {
    cudaStream_t stream = resources_->compute.get();
    if (bias_data && beta == 0.0 && shape.out_dtype != DType::float32) {
      // A half c with a bias (F.linear's): c starts as the bias rows (exact in half) and cuBLAS adds
      // the product in float32, so c is rounded once, not once for the product and again for the bias.
      OOC_CUDA_CHECK(cudaMemsetAsync(c_data, 0, static_cast<size_t>(shape.m * shape.n) * dtype_size(shape.out_dtype),
                                     stream));
      cuda_kernels::add_row_bias(shape.m, shape.n, shape.dtype, bias_data, shape.out_dtype, c_data, stream);
      resources_->blas.run(shape, a_data, b_data, c_data, alpha, 1.0, workspace, workspace_bytes, stream);
      return;
    }
    resources_->blas.run(shape, a_data, b_data, c_data, alpha, beta, workspace, workspace_bytes, stream);
    if (bias_data) cuda_kernels::add_row_bias(shape.m, shape.n, shape.dtype, bias_data, shape.out_dtype, c_data, stream);
  }

  // Batch norm: our own kernels (layer_kernels.cu).
  // Batch norm's kernels take every dtype (layer_kernels.hpp).
  void do_channel_moments(const ChunkChannels& shape, const void* x_data, double* stats) override {
    double* scratch = resources_->reduction_scratch.get(cuda_kernels::reduction_scratch_bytes(shape));
    cuda_kernels::channel_moments(shape, x_data, stats, scratch, resources_->compute.get());
  }

  void do_channel_grad_sums(const ChunkChannels& shape, const void* x_data, const void* dy_data,
                            const float* mean_invstd, double* sums) override {
    double* scratch = resources_->reduction_scratch.get(cuda_kernels::reduction_scratch_bytes(shape));
    cuda_kernels::channel_grad_sums(shape, x_data, dy_data, mean_invstd, sums, scratch, resources_->compute.get());
  }

  void do_channel_affine(const ChunkChannels& shape, const void* x_data, const void* dy_data, const float* coef,
                         double beta, void* y_data) override {
    cuda_kernels::channel_affine(shape, x_data, dy_data, coef, static_cast<float>(beta), y_data,
                                 resources_->compute.get());
  }

  // The layers of layers.hpp (cudnn_layers.cpp), with the cuDNN handle on the compute stream.
  // Activations cuDNN has no mode for run as our own kernels (activation_formulas.hpp).
  void do_activation_forward(const ChunkConv& s, ActivationMode mode, double coef, const void* x_data, void* y_data,
                             double alpha, double beta) override {
    if (!cudnn_layers::has_activation(mode)) {  // our own float32 kernels
      float32_kernel(s, "activation_forward");
      cuda_kernels::activation_forward(x_elements(s), mode, static_cast<float>(coef), f(x_data), f(y_data),
                                       static_cast<float>(alpha), static_cast<float>(beta), resources_->compute.get());
      return;
    }
    cudnn_layers::activation_forward(cudnn_on_compute(), s, mode, coef, x_data, y_data, {alpha, beta});
  }
  void do_activation_backward(const ChunkConv& s, ActivationMode mode, double coef, const void* y_data,
                              const void* dy_data, const void* x_data, void* dx_data, double alpha,
                              double beta) override {
    if (!cudnn_layers::has_activation(mode)) {  // our own float32 kernels
      float32_kernel(s, "activation_backward");
      cuda_kernels::activation_backward(x_elements(s), mode, static_cast<float>(coef), f(y_data), f(dy_data),
                                        f(x_data), f(dx_data), static_cast<float>(alpha), static_cast<float>(beta),
                                        resources_->compute.get());
      return;
    }
    cudnn_layers::activation_backward(cudnn_on_compute(), s, mode, coef, y_data, dy_data, x_data, dx_data,
                                      {alpha, beta});
  }
  void do_softmax_forward(const ChunkConv& s, SoftmaxMode mode, bool log, const void* x_data, void* y_data,
                          double alpha, double beta) override {
    cudnn_layers::softmax_forward(cudnn_on_compute(), s, mode, log, x_data, y_data, {alpha, beta});
  }
  void do_softmax_backward(const ChunkConv& s, SoftmaxMode mode, bool log, const void* y_data, const void* dy_data,
                           void* dx_data, double alpha, double beta) override {
    cudnn_layers::softmax_backward(cudnn_on_compute(), s, mode, log, y_data, dy_data, dx_data, {alpha, beta});
  }
  void do_pool_forward(const ChunkConv& s, PoolMode mode, const void* x_data, void* y_data, double alpha,
                       double beta) override {
    cudnn_layers::pool_forward(cudnn_on_compute(), s, mode, x_data, y_data, {alpha, beta});
  }
  void do_pool_backward(const ChunkConv& s, PoolMode mode, const void* y_data, const void* dy_data,
                        const void* x_data, void* dx_data, double alpha, double beta) override {
    cudnn_layers::pool_backward(cudnn_on_compute(), s, mode, y_data, dy_data, x_data, dx_data, {alpha, beta});
  }
  void do_add_tensor(const ChunkConv& a_shape, const ChunkConv& out_shape, double alpha, const void* a_data,
                     double beta, const void* b_data, void* out_data) override {
    if (out_shape.dtype == DType::bfloat16) {  // cudnnAddTensor does not document bfloat16 (cudnn_layers.hpp)
      cuda_kernels::add_tensor_bf16(a_shape, out_shape, static_cast<float>(alpha), a_data, static_cast<float>(beta),
                                    b_data, out_data, resources_->compute.get());
      return;
    }
    cudnn_layers::add_tensor(cudnn_on_compute(), resources_->compute.get(), a_shape, out_shape, alpha, a_data, beta,
                             b_data, out_data);
  }

  void do_copy_on_device(const StridedCopy& copy) override {
    issue_strided_copy(copy, max_pitch_, resources_->compute.get());
  }
  void do_zero_on_device(void* device_dst, size_t bytes) override {
    OOC_CUDA_CHECK(cudaMemsetAsync(device_dst, 0, bytes, resources_->compute.get()));
  }
  void do_convert_on_device(const void* src, DType from, void* dst, DType to, int64_t count) override {
    cuda_kernels::convert(from, src, to, dst, count, resources_->compute.get());
  }
  void do_copy_h2d_strided(const StridedCopy& copy) override {
    issue_strided_copy(copy, max_pitch_, resources_->h2d.get());
  }
  void do_copy_d2h_strided(const StridedCopy& copy) override {
    issue_strided_copy(copy, max_pitch_, resources_->d2h.get());
  }
  void do_zero_device(void* device_dst, size_t bytes) override {
    OOC_CUDA_CHECK(cudaMemsetAsync(device_dst, 0, bytes, resources_->h2d.get()));
  }

  QueueTimer::Span timed(Queue queue) { return QueueTimer::Span(queue_timer_, static_cast<int>(queue),
  stream_of(queue)); }

  cudaStream_t stream_of(Queue queue) const {
    switch (queue) {
      case Queue::h2d: return resources_->h2d.get();
      case Queue::compute: return resources_->compute.get();
      case Queue::d2h: return resources_->d2h.get();
    }
    throw std::logic_error("cuda backend: unknown queue");
  }

  // The cuDNN handle, bound to the compute stream (the handle is shared with the convolutions).
  cudnnHandle_t cudnn_on_compute() {
    OOC_CUDNN_CHECK(cudnnSetStream(resources_->cudnn, resources_->compute.get()));
    return resources_->cudnn;
  }

  // The cached setup of this chunk shape and operation, with the handle bound to the compute stream.
  ConvSetup& setup_for(const ChunkConv& shape, Operation op, void* workspace, size_t workspace_bytes) {
    if (workspace_bytes > 0 && !workspace)
      throw std::logic_error(std::string("cuda backend: ") + operation_name(op) +
                             " was promised a workspace but given none");
    cudnnHandle_t handle = resources_->cudnn;
    ConvSetup& setup = resources_->conv_setups.get(handle, shape, workspace_bytes, op);
    OOC_CUDNN_CHECK(cudnnSetStream(handle, resources_->compute.get()));
    return setup;
  }

  // One convolution (forward, backward data or filter) of in1 and in2 into out: the chunk shape's
  // setup, its algorithms timed on its first chunk, then cuDNN's call with the fallbacks, which may
  // change the setup's algorithm and workspace size between tries. Returns the setup (forward adds
  // the bias with it).
  ConvSetup& run_conv(Operation op, const ChunkConv& shape, const void* in1, const void* in2, void* out, double alpha,
                      double beta, void* workspace, size_t workspace_bytes) {
    ConvSetup& setup = setup_for(shape, op, workspace, workspace_bytes);
    benchmark_once(setup, op, shape, in1, in2, out, beta, workspace, workspace_bytes);
    const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    run_with_fallback(setup, op, workspace_bytes, cudnn_call_name(op), [&] {
      return convolve(op, setup, &alpha_f, &beta_f, setup.workspace_bytes ? workspace : nullptr, in1, in2, out);
    });
    return setup;
  }

  // On a shape's first chunk, times the algorithms on its buffers and keeps the fastest
  // (OOC_CUDNN_FIND=0: cuDNN's heuristic pick only). cudnnFind*Ex overwrites the output, so a chunk
  // that accumulates into it (beta != 0) is timed writing into the workspace's tail instead, when
  // the output is small enough to leave most of the workspace to the algorithms (a dw tile, which
  // accumulates over every chunk of a backward-filter call); otherwise the heuristic pick stays.
  void benchmark_once(ConvSetup& setup, Operation op, const ChunkConv& shape, const void* in1, const void* in2,
                      void* out, double beta, void* workspace, size_t workspace_bytes) {
    if (setup.benchmarked || !find_algorithms_) return;
    if (beta != 0.0) {
      const size_t scratch =
          (static_cast<size_t>(output_elements(shape, op)) * dtype_size(shape.out_dtype) + 255) / 256 * 256;
      if (scratch * 2 > workspace_bytes) return;
      workspace_bytes -= scratch;
      out = static_cast<char*>(workspace) + workspace_bytes;
    }
    ConvSetupCache::benchmark(resources_->cudnn, setup, op, in1, in2, out, workspace, workspace_bytes);
  }

  static int64_t output_elements(const ChunkConv& s, Operation op) {
    return op == Operation::forward ? y_elements(s) : op == Operation::backward_data ? x_elements(s) : w_elements(s);
  }

  // Runs a cuDNN call; where cuDNN refuses the chosen algorithm, falls back (and keeps the
  // fallback for this shape) until it runs or no algorithm is left. Throws cudnn_error with cuDNN's
  // reason for the last refusal.
  template <typename Call>
  void run_with_fallback(ConvSetup& setup, Operation op, size_t workspace_limit, const char* call_name, Call call) {
    cudnnStatus_t status = call();
    std::string reason = status == CUDNN_STATUS_SUCCESS ? std::string() : cuda_detail::last_cudnn_error();
    while (refuses_algorithm(status, reason) &&
           ConvSetupCache::fall_back(resources_->cudnn, setup, op, workspace_limit)) {
      status = call();
      reason = status == CUDNN_STATUS_SUCCESS ? std::string() : cuda_detail::last_cudnn_error();
    }
    if (status != CUDNN_STATUS_SUCCESS) cuda_detail::throw_cudnn_error(status, call_name, __FILE__, __LINE__, reason);
  }

  // cuDNN refuses an algorithm at run time with NOT_SUPPORTED, or with BAD_PARAM when it needs more
  // workspace than the size query reported (a half 3-D backward data on the H100). Any other
  // BAD_PARAM is a bug of ours and is reported, not worked around.
  static bool refuses_algorithm(cudnnStatus_t status, const std::string& reason) {
    const bool about_workspace =
        reason.find("orkSpace") != std::string::npos || reason.find("orkspace") != std::string::npos;
    return status == CUDNN_STATUS_NOT_SUPPORTED || (status == CUDNN_STATUS_BAD_PARAM && about_workspace);
  }

  int device_;
  MachineModel machine_;
  std::vector<int> near_cpus_;  // its NUMA node's CPUs; empty: unknown
  bool find_algorithms_ = !env_is("OOC_CUDNN_FIND", "0");
  // OOC_DEPTHWISE_WGRAD=cudnn sends depthwise filter gradients to cuDNN instead of our kernel, for
  // the benchmarks that compare the two.
  bool own_depthwise_wgrad_ = !env_is("OOC_DEPTHWISE_WGRAD", "cudnn");
  QueueTimer queue_timer_;  // OOC_PROFILE_QUEUES=1: device time per queue, for RunStats
  size_t max_pitch_ = 0;  // cudaDevAttrMaxPitch: the widest row stride one pitched copy accepts
  std::unique_ptr<DeviceResources> resources_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  if (device < 0) throw invalid_argument("device must be >= 0, got " + std::to_string(device));
  return std::make_unique<CudaBackend>(device);
}

}  // namespace ooc
