#include "backend/cuda/queue_timer.hpp"

#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

void QueueTimer::clear() noexcept {
  for (auto& queue : spans_) {
    for (auto& [start, stop] : queue) {
      if (start) cuda_detail::ignore_cuda_error(cudaEventDestroy(start));
      if (stop) cuda_detail::ignore_cuda_error(cudaEventDestroy(stop));
    }
    queue.clear();
  }
}

void QueueTimer::start() {
  clear();
  const char* flag = std::getenv("OOC_PROFILE_QUEUES");
  enabled_ = flag && std::string(flag) == "1";
}

void QueueTimer::begin(int queue, cudaStream_t stream) {
  cudaEvent_t start = nullptr;
  OOC_CUDA_CHECK(cudaEventCreate(&start));
  spans_[queue].push_back({start, nullptr});
  OOC_CUDA_CHECK(cudaEventRecord(start, stream));
}

void QueueTimer::end(int queue, cudaStream_t stream) noexcept {
  auto& spans = spans_[queue];
  if (spans.empty() || spans.back().second) return;
  cudaEvent_t stop = nullptr;
  if (cudaEventCreate(&stop) != cudaSuccess) {
    cuda_detail::clear_last_cuda_error();
    return;
  }
  spans.back().second = stop;
  cuda_detail::ignore_cuda_error(cudaEventRecord(stop, stream));
}

std::array<double, 3> QueueTimer::busy_seconds() {
  std::array<double, 3> busy{-1, -1, -1};
  if (!enabled_) return busy;
  for (int q = 0; q < 3; ++q) {
    busy[q] = 0;
    for (const auto& [start, stop] : spans_[q]) {
      if (!stop) continue;
      float ms = 0;
      OOC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      busy[q] += ms / 1e3;
    }
  }
  clear();
  return busy;
}

}  // namespace ooc
