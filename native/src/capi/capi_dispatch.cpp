// Where a C API call runs: cuDNN (or cuBLAS) itself when every tensor is on the device within the
// memory limit, else the out-of-core path with options that first wait for the caller's stream.
#include <atomic>
#include <mutex>
#include <vector>

#include "api/cuda_status.hpp"
#include "api/memory_kind.hpp"
#include "capi/capi_internal.hpp"
#include "ooc/ooc_cudnn.h"

namespace ooc::capi {
namespace {

std::atomic<bool> g_host_backend{false};

// Legacy cuDNN descriptors count elements in int; beyond that only the chunked path can run.
constexpr int64_t kMaxInCoreElements = (int64_t{1} << 31) - 1;

}  // namespace

bool host_backend_for_tests() noexcept { return g_host_backend; }

void testing::use_host_backend(bool enabled) { g_host_backend = enabled; }

std::optional<std::string> in_core(const char* call, std::initializer_list<TensorRef> tensors) {
  if (g_host_backend) return std::nullopt;
  size_t bytes = 0;
  for (const TensorRef& t : tensors) {
    if (!t.data) continue;  // an optional tensor the call goes without
    if (t.elements > kMaxInCoreElements || !api::is_device_memory(t.data)) return std::nullopt;
    bytes += static_cast<size_t>(t.elements) * sizeof(float);
  }
  const size_t limit = default_memory_limit();
  if (limit != 0 && bytes > limit) return std::nullopt;
  return std::string(call) + " called directly: every tensor on the device, " + std::to_string(bytes) + " bytes" +
         (limit ? " within the memory limit of " + std::to_string(limit) + " bytes" : " (no memory limit set)");
}

// The caller's stream may still be producing the inputs: wait for it, and for the legacy default
// stream, which a blocking caller stream would be ordered after (ooc_cudaMemcpy's device-to-device
// copies land there). The run returns when the output is in place, so later work on either
// stream sees it.
// oocSetDevices' list, for every out-of-core call of the process (empty: the current device alone).
std::mutex g_devices_mutex;
std::vector<int> g_devices;

std::vector<int> call_devices() {
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  return g_devices;
}

Options out_of_core_options(const std::function<cudaStream_t()>& caller_stream) {
  Options options;
  options.devices = call_devices();
  if (g_host_backend) {
    options.backend = BackendKind::host;
    return options;
  }
  if (device_count() == 0) throw cuda_error(cudaErrorNoDevice, "no CUDA device is present");
  options.backend = BackendKind::cuda;
  const cudaStream_t stream = caller_stream();
  // The handle's device: its stream's (a stream belongs to one device), or for the legacy stream
  // (null) the current device, which cuDNN requires to be the one the handle was created on.
  // oocSetDevices' list, when set, overrides it.
  if (stream == nullptr)
    OOC_API_CUDA_CHECK(cudaGetDevice(&options.device));
  else
    OOC_API_CUDA_CHECK(cudaStreamGetDevice(stream, &options.device));
  OOC_API_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (stream != nullptr) OOC_API_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return options;
}

Options out_of_core_options(cudnnHandle_t handle) {
  return out_of_core_options([handle] {
    cudaStream_t stream = nullptr;
    OOC_API_CUDNN_CHECK(cudnnGetStream(handle, &stream));
    return stream;
  });
}

Options out_of_core_options(cudnnHandle_t handle, cudnnConvolutionDescriptor_t convDesc) {
  Options options = out_of_core_options(handle);
  options.math = conv_math_mode(convDesc);
  return options;
}

void check_handle(cudnnHandle_t handle) {
  if (!handle) throw invalid_argument("handle is null");
}

// Device (and managed) memory through the CUDA runtime, any host memory directly. The cuda path
// copies synchronously on the legacy stream, after out_of_core_options has drained the caller's.
std::vector<float> read_floats(const void* src, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  api::copy_to_host(v.data(), src, v.size() * sizeof(float));
  return v;
}

void write_floats(void* dst, const std::vector<float>& values) {
  api::copy_from_host(dst, values.data(), values.size() * sizeof(float));
}

}  // namespace ooc::capi

extern "C" void oocSetMemoryLimit(size_t bytes) { ooc::set_default_memory_limit(bytes); }

extern "C" cudnnStatus_t oocSetDevices(const int* devices, int count) {
  if (count < 0 || (count > 0 && !devices)) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < count; ++i)
    if (devices[i] < 0) return CUDNN_STATUS_BAD_PARAM;
  std::lock_guard<std::mutex> lock(ooc::capi::g_devices_mutex);
  ooc::capi::g_devices.assign(devices, devices + count);
  return CUDNN_STATUS_SUCCESS;
}

extern "C" int oocGetDevices(int* devices, int capacity) {
  const std::vector<int> listed = ooc::capi::call_devices();
  for (int i = 0; i < capacity && i < static_cast<int>(listed.size()); ++i) devices[i] = listed[i];
  return static_cast<int>(listed.size());
}
extern "C" size_t oocGetMemoryLimit(void) { return ooc::default_memory_limit(); }
