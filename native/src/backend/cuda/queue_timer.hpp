// Device time each queue (H2D, compute, D2H) spends busy during one run, from timing events around
// every operation. Off unless OOC_PROFILE_QUEUES=1: it adds two events per operation. It answers
// the question the wall time cannot: which of link-in, compute and link-out bounds a run.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <utility>
#include <vector>

namespace ooc {

class QueueTimer {
 public:
  QueueTimer() = default;
  ~QueueTimer() { clear(); }
  QueueTimer(const QueueTimer&) = delete;
  QueueTimer& operator=(const QueueTimer&) = delete;

  void start();  // forgets the last run; reads OOC_PROFILE_QUEUES
  bool enabled() const { return enabled_; }
  void begin(int queue, cudaStream_t stream);
  void end(int queue, cudaStream_t stream) noexcept;
  // Summed span durations per queue (the streams must be synchronized); -1 when not enabled.
  std::array<double, 3> busy_seconds();

  // Times the operations issued on one queue during its lifetime.
  class Span {
   public:
    Span(QueueTimer& timer, int queue, cudaStream_t stream) : timer_(timer), queue_(queue), stream_(stream) {
      if (timer_.enabled()) timer_.begin(queue_, stream_);
    }
    ~Span() {
      if (timer_.enabled()) timer_.end(queue_, stream_);
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    QueueTimer& timer_;
    int queue_;
    cudaStream_t stream_;
  };

 private:
  void clear() noexcept;
  bool enabled_ = false;
  std::array<std::vector<std::pair<cudaEvent_t, cudaEvent_t>>, 3> spans_;
};

}  // namespace ooc
