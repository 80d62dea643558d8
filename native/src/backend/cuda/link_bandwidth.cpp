// Measures the host<->device link with pinned buffers: the ceiling every out-of-core operation is
// judged against (docs/ARCHITECTURE.md, "The cost model": the roofline is the slowest of H2D, D2H
// and both at once).
#include "backend/cuda/link_bandwidth.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/device_scope.hpp"
#include "backend/cuda/pinned_memory.hpp"

namespace ooc {
namespace {

struct PinnedBuffer {
  explicit PinnedBuffer(size_t bytes) : ptr(pinned_host_alloc(bytes)) {}
  ~PinnedBuffer() { pinned_host_free(ptr); }
  void* ptr;
};

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { OOC_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
  ~DeviceBuffer() { cuda_detail::ignore_cuda_error(cudaFree(ptr)); }
  void* ptr = nullptr;
};

struct TimingEvent {
  TimingEvent() { OOC_CUDA_CHECK(cudaEventCreate(&event)); }
  ~TimingEvent() { cuda_detail::ignore_cuda_error(cudaEventDestroy(event)); }
  cudaEvent_t event = nullptr;
};

// Median seconds of `reps` timed runs of issue(), which enqueues copies that start after `start`
// on `first` and end before `stop` is recorded on `first`.
template <class Issue>
double median_seconds(int reps, cudaStream_t first, Issue issue) {
  std::vector<double> times;
  TimingEvent start, stop;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up
    OOC_CUDA_CHECK(cudaEventRecord(start.event, first));
    issue(start.event, stop.event);
    OOC_CUDA_CHECK(cudaEventSynchronize(stop.event));
    float ms = 0;
    OOC_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event, stop.event));
    if (r > 0) times.push_back(ms / 1e3);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

LinkBandwidth measure_pinned_link_bandwidth(int device, size_t bytes) {
  DeviceScope scope(device);
  PinnedBuffer host_in(bytes), host_out(bytes);
  DeviceBuffer dev_in(bytes), dev_out(bytes);
  CudaStream a, b;
  const int reps = 5;
  LinkBandwidth bw;
  const double h2d = median_seconds(reps, a.get(), [&](cudaEvent_t, cudaEvent_t stop) {
    OOC_CUDA_CHECK(cudaMemcpyAsync(dev_in.ptr, host_in.ptr, bytes, cudaMemcpyHostToDevice, a.get()));
    OOC_CUDA_CHECK(cudaEventRecord(stop, a.get()));
  });
  const double d2h = median_seconds(reps, a.get(), [&](cudaEvent_t, cudaEvent_t stop) {
    OOC_CUDA_CHECK(cudaMemcpyAsync(host_out.ptr, dev_out.ptr, bytes, cudaMemcpyDeviceToHost, a.get()));
    OOC_CUDA_CHECK(cudaEventRecord(stop, a.get()));
  });
  TimingEvent b_done;
  const double both = median_seconds(reps, a.get(), [&](cudaEvent_t start, cudaEvent_t stop) {
    OOC_CUDA_CHECK(cudaStreamWaitEvent(b.get(), start, 0));
    OOC_CUDA_CHECK(cudaMemcpyAsync(dev_in.ptr, host_in.ptr, bytes, cudaMemcpyHostToDevice, a.get()));
    OOC_CUDA_CHECK(cudaMemcpyAsync(host_out.ptr, dev_out.ptr, bytes, cudaMemcpyDeviceToHost, b.get()));
    OOC_CUDA_CHECK(cudaEventRecord(b_done.event, b.get()));
    OOC_CUDA_CHECK(cudaStreamWaitEvent(a.get(), b_done.event, 0));
    OOC_CUDA_CHECK(cudaEventRecord(stop, a.get()));
  });
  bw.h2d = static_cast<double>(bytes) / h2d;
  bw.d2h = static_cast<double>(bytes) / d2h;
  bw.bidir = 2.0 * static_cast<double>(bytes) / both;
  return bw;
}

}  // namespace ooc
