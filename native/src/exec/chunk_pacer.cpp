#include "exec/chunk_pacer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace ooc {

int ChunkPacer::lead_for(bool inputs_staged, double predicted_seconds_per_chunk) {
  const int base = inputs_staged ? kStagedLead : kDirectLead;
  if (!(predicted_seconds_per_chunk > 0) || predicted_seconds_per_chunk >= kShortChunkSeconds) return base;
  // As many chunks as fill kShortChunkSeconds of device time, within [base, kMaxLead].
  const double fill = std::ceil(kShortChunkSeconds / predicted_seconds_per_chunk);
  return static_cast<int>(std::clamp(fill, static_cast<double>(base), static_cast<double>(kMaxLead)));
}

void ChunkPacer::before_chunk(int64_t i) {
  if (i >= lead_) {
    const Backend::Event oldest = computed_[static_cast<size_t>(i % lead_)];  // chunk i - lead's
    if (!backend_.query(oldest)) {
      // Poll rather than block, so that a cancel (or Ctrl-C, seen by the observer) is noticed while
      // the device works. Yield for the first 2 ms (a short chunk's wait is tens of microseconds,
      // and a sleep's wake-up latency of ~60 us would be added to every one of them), then sleep
      // in small steps: the next chunks' loads are already queued, so a late wake-up costs no link time.
      using Clock = std::chrono::steady_clock;
      const auto start = Clock::now();
      do {
        if (call_) call_->report(done_);
        if (Clock::now() - start < std::chrono::milliseconds(2))
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      } while (!backend_.query(oldest));
      waited_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    }
    done_ = std::max(done_, i - lead_ + 1);
  }
  // The chunks issued since may have computed too (the host backend's always have).
  for (int64_t j = i - 1; j >= done_ && j > i - lead_; --j)
    if (backend_.query(computed_[static_cast<size_t>(j % lead_)])) {
      done_ = j + 1;
      break;
    }
  if (call_) call_->report(done_);
}

}  // namespace ooc
