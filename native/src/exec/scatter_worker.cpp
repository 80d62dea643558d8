#include "exec/scatter_worker.hpp"

#include <chrono>

namespace ooc {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

ScatterWorker::ScatterWorker(Backend& backend, ThreadPool& pool, int slots)
    : backend_(backend), pool_(pool), uses_(static_cast<size_t>(slots), 0), thread_([this] { run(); }) {}

ScatterWorker::~ScatterWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ScatterWorker::push(int slot, const void* staging, Backend::Event copied, const TensorView& view, const Box& box) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    queue_.push_back({slot, staging, copied, view, box});
    ++uses_[static_cast<size_t>(slot)];
  }
  changed_.notify_all();
}

void ScatterWorker::wait_until(std::unique_lock<std::mutex>& lock, int slot) {
  changed_.wait(lock, [&] {
    if (error_) return true;
    if (slot >= 0) return uses_[static_cast<size_t>(slot)] == 0;
    for (int u : uses_)
      if (u) return false;
    return true;
  });
  if (error_) std::rethrow_exception(error_);
}

void ScatterWorker::wait_slot_free(int slot) {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_until(lock, slot);
}

void ScatterWorker::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_until(lock, -1);
}

void ScatterWorker::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ || error_) return;
      item = queue_.front();
      queue_.pop_front();
    }
    try {
      auto t = Clock::now();
      backend_.host_wait(item.copied);
      const double waited = seconds_since(t);
      t = Clock::now();
      scatter_box(item.staging, item.view, item.box, pool_);
      const double scattered = seconds_since(t);
      std::lock_guard<std::mutex> lock(mutex_);
      host_wait_seconds_ += waited;
      scatter_seconds_ += scattered;
      --uses_[static_cast<size_t>(item.slot)];
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    changed_.notify_all();
  }
}

}  // namespace ooc
