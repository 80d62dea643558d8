#include "plan/plan_cache.hpp"

#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace ooc {

PlanKey& PlanKey::add(const ConvProblem& p) {
  add(p.op).add(p.spatial_dims).add(p.n).add(p.c).add(p.k).add(p.groups);
  for (const Dims3* dims : {&p.in, &p.kernel, &p.stride, &p.padding, &p.padding_extra, &p.dilation, &p.out})
    for (int64_t v : *dims) add(v);
  return add(p.dtype).add(p.alpha).add(p.beta).add(p.has_bias).add(p.padding_mode).add(p.layout);
}

PlanKey& PlanKey::add(const PlannerConfig& c) {
  add(c.memory_limit).add(c.workspace_bytes).add(c.workspace_max).add(c.filter_workspace_per_x_byte);
  const MachineModel& m = c.machine;
  add(m.h2d_bytes_per_s).add(m.d2h_bytes_per_s).add(m.bidir_bytes_per_s).add(m.host_copy_bytes_per_s);
  add(m.flops_per_s).add(m.chunk_half_flops).add(m.chunk_overhead_s).add(m.copies_share_compute);
  return add(c.backend).add(c.math);
}

namespace {

constexpr size_t kCacheBytes = size_t{64} << 20;

size_t footprint(const Plan& plan) {
  return sizeof(Plan) + plan.chunks.size() * sizeof(Chunk) + plan.fused.size() + plan.backend.size();
}

class PlanCache {
 public:
  std::shared_ptr<const Plan> get(const std::string& key, const std::function<Plan()>& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        ++hits_;
        order_.splice(order_.begin(), order_, it->second);  // most recently used first
        return it->second->second;
      }
    }
    // Planned without the lock: another thread's lookups need not wait for a search.
    auto plan = std::make_shared<const Plan>(make());
    std::lock_guard<std::mutex> lock(mutex_);
    if (index_.count(key)) return plan;  // planned twice at once: keep the first
    order_.emplace_front(key, plan);
    index_[key] = order_.begin();
    bytes_ += footprint(*plan);
    while (bytes_ > kCacheBytes && order_.size() > 1) {
      bytes_ -= footprint(*order_.back().second);
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return plan;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    order_.clear();
    index_.clear();
    bytes_ = 0;
    hits_ = 0;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.size();
  }
  size_t hits() {
    std::lock_guard<std::mutex> lock(mutex_);
    return hits_;
  }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Plan>>;
  std::mutex mutex_;
  std::list<Entry> order_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0, hits_ = 0;
};

PlanCache& cache() {
  static auto& c = *new PlanCache;  // never destroyed: calls may run during static destruction
  return c;
}

}  // namespace

std::shared_ptr<const Plan> cached_plan(const PlanKey& key, const std::function<Plan()>& make) {
  return cache().get(key.bytes(), make);
}
void clear_plan_cache() { cache().clear(); }
size_t plan_cache_size() { return cache().size(); }
size_t plan_cache_hits() { return cache().hits(); }

}  // namespace ooc
