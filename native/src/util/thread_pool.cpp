#include "util/thread_pool.hpp"

#include <algorithm>

#include "util/numa_placement.hpp"

namespace ooc {
namespace {
// Set on the pool's own workers: a parallel_for issued from inside a body runs inline instead of
// waiting for workers that are busy running that very body.
thread_local const ThreadPool* t_worker_of = nullptr;
// UseDevicePools' choice on this thread.
thread_local DevicePools* t_device_pools = nullptr;

int gather_threads(size_t cpus) { return static_cast<int>(std::clamp<size_t>(cpus, 1, 16)); }
int scatter_threads(size_t cpus) { return static_cast<int>(std::clamp<size_t>(cpus / 2, 1, 8)); }
}  // namespace

ThreadPool::ThreadPool(int threads, std::vector<int> cpus, std::function<void()> on_start) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, cpus, on_start] { worker_loop(cpus, on_start); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::shared() {
  if (t_device_pools) return t_device_pools->gather;
  static ThreadPool pool(gather_threads(std::thread::hardware_concurrency()));
  return pool;
}

ThreadPool& ThreadPool::scatter_shared() {
  if (t_device_pools) return t_device_pools->scatter;
  static ThreadPool pool(scatter_threads(std::thread::hardware_concurrency()));
  return pool;
}

DevicePools::DevicePools(const std::vector<int>& cpus)
    : gather(gather_threads(cpus.size()), cpus, [this] { t_device_pools = this; }),
      scatter(scatter_threads(cpus.size()), cpus, [this] { t_device_pools = this; }) {}

UseDevicePools::UseDevicePools(DevicePools* pools) noexcept : previous_(t_device_pools) { t_device_pools = pools; }
UseDevicePools::~UseDevicePools() { t_device_pools = previous_; }

void ThreadPool::run_blocks() {
  for (;;) {
    int64_t begin;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_ >= count_ || error_) return;
      begin = next_;
      next_ = std::min(count_, next_ + block_);
    }
    try {
      (*body_)(begin, std::min(count_, begin + block_));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(const std::vector<int>& cpus, const std::function<void()>& on_start) {
  t_worker_of = this;
  pin_this_thread(cpus);  // best effort: where the OS refuses, the worker runs anywhere
  if (on_start) on_start();
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
    }
    run_blocks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --active_;
    }
    done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1 || t_worker_of == this || in_call_ == std::this_thread::get_id()) {
    body(0, count);
    return;
  }
  std::lock_guard<std::mutex> call(call_mutex_);
  in_call_ = std::this_thread::get_id();
  struct ClearCaller {
    std::atomic<std::thread::id>& id;
    ~ClearCaller() { id.store(std::thread::id()); }
  } clear_caller{in_call_};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    count_ = count;
    // A few blocks per thread balance uneven rows without much locking.
    block_ = std::max<int64_t>(1, count / (4 * size()));
    next_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_blocks();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_ == 0 && (next_ >= count_ || error_); });
    // Workers that woke late find no blocks left; make sure none still holds body_.
    body_ = nullptr;
    count_ = 0;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ooc
