// Page-locked staging buffers that outlive the call that used them: pinning costs about 0.3 s/GB,
// more than the copies a buffer serves, so released buffers are cached and handed out again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ooc {

class PinnedPool {
 public:
  explicit PinnedPool(size_t cache_limit_bytes) : cache_limit_bytes_(cache_limit_bytes) {}
  ~PinnedPool();  // frees every buffer, cached or still handed out
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // The smallest cached buffer of at least `bytes`, else a new one. Throws cuda_error.
  void* allocate(size_t bytes);
  // Back to the cache (or freed, past the cache limit). The caller guarantees no queued copy
  // still uses it. Pointers this pool did not hand out are ignored.
  void release(void* ptr) noexcept;
  void free_cached() noexcept;  // gives every cached buffer back to the system

 private:
  struct CachedBuffer {
    void* ptr;
    size_t bytes;
    uint64_t released_at;  // eviction order: the longest unused goes first
  };
  void free_cached_locked() noexcept;
  void evict_to_limit_locked() noexcept;

  std::mutex mutex_;
  std::unordered_map<void*, size_t> handed_out_;  // ptr -> capacity
  std::vector<CachedBuffer> cached_;
  size_t cached_bytes_ = 0;
  size_t cache_limit_bytes_;
  uint64_t release_clock_ = 0;
};

}  // namespace ooc
