// How far the pipeline's host thread may run ahead of the device, and where a run consults its
// observer (exec/observed_call.hpp). Without it a call whose tensors are all pinned would queue
// every chunk's copies and kernels at once and then block in the final synchronize: nothing could
// stop it and nobody would know how far it got. Chunk i is issued once chunk i - lead has computed.
// The lead (lead_for) is what the chunks need:
// - 2 where every tensor is DMA'd directly: chunk i's loads are queued while chunk i - 1 computes,
//   all the overlap the slot rings allow in the link-bound steady state;
// - 3 where inputs are staged: the host gathers chunk i while chunk i - 1 is copied and chunk i - 2
//   computes, so a gather slower than one compute (vol3d's 144 MB chunks: 3 ms of gather, 1 ms of
//   compute) is not held back by the pacer as well as by the staging ring (3 buffers);
// - up to kMaxLead for short chunks (predicted under kShortChunkSeconds), whose issue cost on the
//   host is comparable to their device time: a deeper queue keeps the device fed across the
//   host's hiccups.
// A cancelled call drains at most `lead` chunks' work.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "exec/observed_call.hpp"

namespace ooc {

class ChunkPacer {
 public:
  static constexpr int kDirectLead = 2, kStagedLead = 3, kMaxLead = 8;
  static constexpr double kShortChunkSeconds = 100e-6;
  static int lead_for(bool inputs_staged, double predicted_seconds_per_chunk);

  // computed: `lead` events of the pipeline's (it destroys them after draining).
  ChunkPacer(Backend& backend, std::vector<Backend::Event> computed, ObservedCall* call)
      : backend_(backend), computed_(std::move(computed)), lead_(static_cast<int64_t>(computed_.size())), call_(call) {}

  // Before issuing chunk i: waits, reporting to the call while it polls, until chunk i - lead has
  // computed, then reports the chunks known complete. Throws ooc::cancelled when asked to stop.
  void before_chunk(int64_t i);
  // After chunk i's compute was issued (on Queue::compute).
  void computed(int64_t i) { backend_.record(computed_[static_cast<size_t>(i % lead_)], Queue::compute); }
  // The pass ran its `chunks` and the queues have drained.
  void finished(int64_t chunks) {
    if (call_) call_->end_pass(chunks);
  }
  // Seconds before_chunk spent waiting for the device (RunStats::pace_wait_seconds).
  double waited_seconds() const { return waited_seconds_; }

 private:
  Backend& backend_;
  std::vector<Backend::Event> computed_;
  int64_t lead_;
  ObservedCall* call_;
  int64_t done_ = 0;  // chunks known to have computed
  double waited_seconds_ = 0;
};

}  // namespace ooc
