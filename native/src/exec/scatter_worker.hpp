// Scatters output staging buffers into the caller's tensors on a thread of its own (with its own
// worker pool), so that writing chunk i-1 back overlaps gathering chunk i+1 on the pipeline's
// thread: pageable arrays are bound by host memcpy, and gather and scatter then share it.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "exec/region_copy.hpp"
#include "util/thread_pool.hpp"

namespace ooc {

class ScatterWorker {
 public:
  ScatterWorker(Backend& backend, ThreadPool& pool, int slots);
  ~ScatterWorker();  // stops and joins; items still queued are dropped (error paths only)
  ScatterWorker(const ScatterWorker&) = delete;
  ScatterWorker& operator=(const ScatterWorker&) = delete;

  // Once `copied` has completed, scatters the dense staging buffer into view's box.
  void push(int slot, const void* staging, Backend::Event copied, const TensorView& view, const Box& box);
  // Blocks until no queued or running item uses `slot`'s staging buffer. Rethrows worker errors.
  void wait_slot_free(int slot);
  // Blocks until everything pushed is scattered. Rethrows worker errors.
  void finish();

  double scatter_seconds() const { return scatter_seconds_; }      // read after finish()
  double host_wait_seconds() const { return host_wait_seconds_; }  // read after finish()

 private:
  struct Item {
    int slot;
    const void* staging;
    Backend::Event copied;
    TensorView view;
    Box box;
  };
  void run();
  void wait_until(std::unique_lock<std::mutex>& lock, int slot);

  Backend& backend_;
  ThreadPool& pool_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  std::vector<int> uses_;  // queued or running items per slot
  bool stop_ = false;
  std::exception_ptr error_;
  double scatter_seconds_ = 0, host_wait_seconds_ = 0;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace ooc
