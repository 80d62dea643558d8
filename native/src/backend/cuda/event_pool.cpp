#include "backend/cuda/event_pool.hpp"

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_check.hpp"

namespace ooc {

EventPool::~EventPool() {
  for (cudaEvent_t e : events_) cuda_detail::ignore_cuda_error(cudaEventDestroy(e));
}

int EventPool::acquire() {
  if (!free_ids_.empty()) {
    const int id = free_ids_.back();
    free_ids_.pop_back();
    in_use_[static_cast<size_t>(id)] = true;
    return id;
  }
  // Grow every vector first so that nothing can throw once the event exists, and so that
  // release() (noexcept) never needs to allocate.
  const size_t count = events_.size() + 1;
  events_.reserve(count);
  in_use_.reserve(count);
  free_ids_.reserve(count);
  cudaEvent_t event = nullptr;
  OOC_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  events_.push_back(event);
  in_use_.push_back(true);
  return static_cast<int>(events_.size() - 1);
}

void EventPool::release(int id) noexcept {
  const auto i = static_cast<size_t>(id);
  if (id < 0 || i >= events_.size() || !in_use_[i]) return;
  in_use_[i] = false;
  free_ids_.push_back(id);  // capacity reserved in acquire()
}

cudaEvent_t EventPool::at(int id) const {
  const auto i = static_cast<size_t>(id);
  if (id < 0 || i >= events_.size() || !in_use_[i])
    throw std::logic_error("cuda backend: event " + std::to_string(id) + " was never created or is destroyed");
  return events_[i];
}

}  // namespace ooc
