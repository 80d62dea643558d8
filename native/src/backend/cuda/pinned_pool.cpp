#include "backend/cuda/pinned_pool.hpp"

#include <algorithm>

#include "backend/cuda/pinned_memory.hpp"
#include "ooc/errors.hpp"

namespace ooc {

PinnedPool::~PinnedPool() {
  for (const CachedBuffer& b : cached_) pinned_host_free(b.ptr);
  for (const auto& entry : handed_out_) pinned_host_free(entry.first);
}

void* PinnedPool::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto best = cached_.end();
  for (auto it = cached_.begin(); it != cached_.end(); ++it)
    if (it->bytes >= bytes && (best == cached_.end() || it->bytes < best->bytes)) best = it;
  if (best != cached_.end()) {
    const CachedBuffer buffer = *best;
    handed_out_.emplace(buffer.ptr, buffer.bytes);  // may throw: the buffer is still in the cache then
    cached_.erase(best);
    cached_bytes_ -= buffer.bytes;
    return buffer.ptr;
  }
  void* ptr = nullptr;
  try {
    ptr = pinned_host_alloc(bytes);
  } catch (const cuda_error&) {
    // Our own cache may be what exhausted the lockable memory: give it back and try once more.
    if (cached_.empty()) throw;
    free_cached_locked();
    ptr = pinned_host_alloc(bytes);
  }
  try {
    handed_out_.emplace(ptr, bytes);
  } catch (...) {
    pinned_host_free(ptr);
    throw;
  }
  return ptr;
}

void PinnedPool::release(void* ptr) noexcept {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = handed_out_.find(ptr);
  if (found == handed_out_.end()) return;
  const size_t bytes = found->second;
  handed_out_.erase(found);
  if (bytes > cache_limit_bytes_) {
    pinned_host_free(ptr);
    return;
  }
  try {
    cached_.push_back({ptr, bytes, ++release_clock_});
  } catch (...) {
    pinned_host_free(ptr);  // could not remember it: free it rather than leak it
    return;
  }
  cached_bytes_ += bytes;
  evict_to_limit_locked();
}

void PinnedPool::free_cached() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  free_cached_locked();
}

void PinnedPool::free_cached_locked() noexcept {
  for (const CachedBuffer& b : cached_) pinned_host_free(b.ptr);
  cached_.clear();
  cached_bytes_ = 0;
}

void PinnedPool::evict_to_limit_locked() noexcept {
  while (cached_bytes_ > cache_limit_bytes_ && !cached_.empty()) {
    auto oldest = std::min_element(cached_.begin(), cached_.end(), [](const CachedBuffer& a, const CachedBuffer& b) {
      return a.released_at < b.released_at;
    });
    pinned_host_free(oldest->ptr);
    cached_bytes_ -= oldest->bytes;
    cached_.erase(oldest);
  }
}

}  // namespace ooc
