// The observer of the call this thread runs (CallObserver, ooc/types.hpp), for every pass of it.
// run_operation installs one around an operation's run, so that no operation's run function needs
// an argument for it; run_chunks finds it with ObservedCall::current() and reports to it between
// chunks. A call is run on the thread that made it, so a thread-local is exact.
#pragma once

#include <cstdint>

#include "ooc/types.hpp"

namespace ooc {

class ObservedCall {
 public:
  // Installs itself as this thread's current call and reports done 0 (which may already cancel).
  ObservedCall(const CallObserver* observer, int64_t total_chunks, double predicted_seconds);
  ~ObservedCall();  // restores the call that was current before (none, in practice)
  ObservedCall(const ObservedCall&) = delete;
  ObservedCall& operator=(const ObservedCall&) = delete;

  // This thread's observed call, or null (run_chunks called outside run_operation: tests).
  static ObservedCall* current() noexcept;

  // `done` chunks of the current pass have completed. Throws ooc::cancelled when the cancel flag
  // is set or on_chunk says to stop. Cheap: call it as often as the pipeline likes.
  void report(int64_t done);
  // The current pass ran all its `chunks`: later reports count from there.
  void end_pass(int64_t chunks);
  // The call is done: reports done == total (its last chance to cancel).
  void finish();

 private:
  void notify(int64_t done);

  const CallObserver* observer_;
  ChunkProgress progress_;
  int64_t passes_done_ = 0;  // chunks of the passes that have ended
  ObservedCall* previous_;
};

}  // namespace ooc
