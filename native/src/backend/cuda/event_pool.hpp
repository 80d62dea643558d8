// Backend::Event is an index into this pool. Released events go to a free list and are handed out
// again: the pipeline makes a dozen or more per call, and creating them is a driver call each.
#pragma once

#include <vector>

#include <cuda_runtime_api.h>

namespace ooc {

class EventPool {
 public:
  EventPool() = default;
  ~EventPool();  // destroys every event, released or not
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  int acquire();                  // a timing-free event (recycled or new)
  void release(int id) noexcept;  // ignores ids that are not in use
  cudaEvent_t at(int id) const;   // throws std::logic_error for an id that is not in use

 private:
  std::vector<cudaEvent_t> events_;
  std::vector<bool> in_use_;
  std::vector<int> free_ids_;
};

}  // namespace ooc
