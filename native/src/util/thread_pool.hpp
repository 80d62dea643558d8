// A fixed pool of host worker threads: the pipeline gathers and scatters chunk regions on it, the
// host backend runs its kernels on it (so it sits in util/, below both). parallel_for
// splits [0, count) into contiguous blocks, runs them on the workers and the calling thread, and
// returns when all are done (rethrowing the first exception).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ooc {

class ThreadPool {
 public:
  // cpus: the CPUs the workers are pinned to (util/numa_placement.hpp; empty: wherever the OS
  // puts them); on_start: run first on each worker thread.
  explicit ThreadPool(int threads, std::vector<int> cpus = {}, std::function<void()> on_start = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void parallel_for(int64_t count, const std::function<void(int64_t begin, int64_t end)>& body);

  // Shared by every call of the process: min(hardware threads, 16); on a thread inside
  // UseDevicePools, that device's pool instead.
  static ThreadPool& shared();
  // A second pool for scatters that run while shared() gathers: half as many threads.
  static ThreadPool& scatter_shared();

 private:
  void worker_loop(const std::vector<int>& cpus, const std::function<void()>& on_start);
  void run_blocks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::atomic<std::thread::id> in_call_{};  // the thread inside parallel_for (runs blocks too)
  bool stop_ = false;
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t count_ = 0, block_ = 1, next_ = 0;
  int active_ = 0;
  std::exception_ptr error_;
};

// A device's own pair of pools (shared()'s and scatter_shared()'s sizes for `cpus.size()` CPUs),
// their workers pinned to `cpus`: the CPUs of the NUMA node of a GPU (backend.hpp's near_cpus),
// so that the host work of that GPU's pipeline (gathers and scatters of pageable tensors) runs
// near it, and several devices' pipelines do not wait for one another's parallel_for.
struct DevicePools {
  explicit DevicePools(const std::vector<int>& cpus);
  DevicePools(const DevicePools&) = delete;
  DevicePools& operator=(const DevicePools&) = delete;
  ThreadPool gather, scatter;
};

// While alive, ThreadPool::shared() and scatter_shared() return `pools`' on this thread (null:
// the process's); the previous choice comes back on destruction. The pools' own workers use them
// too.
class UseDevicePools {
 public:
  explicit UseDevicePools(DevicePools* pools) noexcept;
  ~UseDevicePools();
  UseDevicePools(const UseDevicePools&) = delete;
  UseDevicePools& operator=(const UseDevicePools&) = delete;

 private:
  DevicePools* previous_;
};

}  // namespace ooc
