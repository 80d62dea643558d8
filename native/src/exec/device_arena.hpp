// One device allocation per call, cut into the plan's slots. Its size is the plan's peak, which the
// planner kept under memory_limit, so nothing the pipeline holds can exceed the budget.
#pragma once

#include <cstddef>
#include <stdexcept>

#include "backend/backend.hpp"

namespace ooc {

class DeviceArena {
 public:
  DeviceArena(Backend& backend, size_t capacity)
      : backend_(backend), capacity_(capacity), base_(capacity ? static_cast<char*>(backend.device_alloc(capacity)) : nullptr) {}
  ~DeviceArena() {
    if (base_) backend_.device_free(base_);
  }
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Slot sizes are 256-byte multiples (planner), so every slot stays aligned.
  void* take(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (used_ + bytes > capacity_) throw std::logic_error("device arena: plan slots exceed the plan's peak");
    void* p = base_ + used_;
    used_ += bytes;
    return p;
  }
  size_t capacity() const { return capacity_; }

 private:
  Backend& backend_;
  size_t capacity_;
  char* base_;
  size_t used_ = 0;
};

}  // namespace ooc
