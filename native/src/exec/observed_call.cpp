#include "exec/observed_call.hpp"

#include <algorithm>

#include "ooc/errors.hpp"

namespace ooc {
namespace {
thread_local ObservedCall* t_current = nullptr;
}  // namespace

ObservedCall::ObservedCall(const CallObserver* observer, int64_t total_chunks, double predicted_seconds)
    : observer_(observer), previous_(t_current) {
  progress_.total = total_chunks;
  progress_.predicted_seconds = predicted_seconds;
  t_current = this;
  try {
    notify(0);
  } catch (...) {
    t_current = previous_;  // a throwing constructor runs no destructor
    throw;
  }
}

ObservedCall::~ObservedCall() { t_current = previous_; }

ObservedCall* ObservedCall::current() noexcept { return t_current; }

void ObservedCall::report(int64_t done) {
  if (observer_) notify(passes_done_ + done);
}

void ObservedCall::end_pass(int64_t chunks) {
  passes_done_ += chunks;
  if (observer_) notify(passes_done_);
}

void ObservedCall::finish() {
  if (observer_) notify(progress_.total);
}

void ObservedCall::notify(int64_t done) {
  if (!observer_) return;
  // Monotone and within total whatever the pipeline reports (a statistics-only batch norm runs
  // one of its two passes).
  progress_.done = std::min(std::max(progress_.done, done), progress_.total);
  const bool cancel = observer_->cancel && observer_->cancel->load(std::memory_order_relaxed);
  if (cancel || (observer_->on_chunk && !observer_->on_chunk(observer_->context, &progress_)))
    throw cancelled(cancel ? "the call was cancelled" : "the call was cancelled by its observer");
}

}  // namespace ooc
