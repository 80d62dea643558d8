// How far the pipeline's host thread may run ahead of the device, and where a run consults its
// observer (exec/observed_call.hpp). Without it a call whose tensors are all pinned would queue
// every chunk's copies and kernels at once and then block in the final synchronize: nothing could
// stop it and nobody would know how far it got. Chunk i is issued once chunk i - kLead has
// computed; with kLead = 2 chunk i's loads are queued while chunk i - 1 computes, which is all the
// overlap the slot rings allow in the link-bound steady state, and a cancelled call drains about
// one chunk's work.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "exec/observed_call.hpp"

namespace ooc {

class ChunkPacer {
 public:
  static constexpr int kLead = 2;
  // computed: kLead events of the pipeline's (it destroys them after draining).
  ChunkPacer(Backend& backend, std::vector<Backend::Event> computed, ObservedCall* call)
      : backend_(backend), computed_(std::move(computed)), call_(call) {}

  // Before issuing chunk i: waits, reporting to the call while it polls, until chunk i - kLead has
  // computed, then reports the chunks known complete. Throws ooc::cancelled when asked to stop.
  void before_chunk(int64_t i);
  // After chunk i's compute was issued (on Queue::compute).
  void computed(int64_t i) { backend_.record(computed_[static_cast<size_t>(i % kLead)], Queue::compute); }
  // The pass ran its `chunks` and the queues have drained.
  void finished(int64_t chunks) {
    if (call_) call_->end_pass(chunks);
  }

 private:
  Backend& backend_;
  std::vector<Backend::Event> computed_;
  ObservedCall* call_;
  int64_t done_ = 0;  // chunks known to have computed
};

}  // namespace ooc
