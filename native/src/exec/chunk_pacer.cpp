#include "exec/chunk_pacer.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace ooc {

void ChunkPacer::before_chunk(int64_t i) {
  if (i >= kLead) {
    const Backend::Event oldest = computed_[static_cast<size_t>(i % kLead)];  // chunk i - kLead's
    if (!backend_.query(oldest)) {
      // Poll rather than block, so that a cancel (or Ctrl-C, seen by the observer) is noticed while
      // the device works. Spin briefly (the wait is usually short), then sleep in small steps: the
      // next chunk's loads are already queued, so a late wake-up costs no link time.
      using Clock = std::chrono::steady_clock;
      const auto start = Clock::now();
      do {
        if (call_) call_->report(done_);
        if (Clock::now() - start < std::chrono::microseconds(200))
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      } while (!backend_.query(oldest));
    }
    done_ = std::max(done_, i - kLead + 1);
  }
  // The chunks issued since may have computed too (the host backend's always have).
  for (int64_t j = i - 1; j >= done_ && j > i - kLead; --j)
    if (backend_.query(computed_[static_cast<size_t>(j % kLead)])) {
      done_ = j + 1;
      break;
    }
  if (call_) call_->report(done_);
}

}  // namespace ooc
