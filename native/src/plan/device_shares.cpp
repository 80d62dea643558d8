#include "plan/device_shares.hpp"

#include <algorithm>
#include <stdexcept>

namespace ooc {
namespace {

// [begin, end) of each reduction group in plan order.
std::vector<std::pair<size_t, size_t>> reduction_groups(const std::vector<Chunk>& chunks) {
  std::vector<std::pair<size_t, size_t>> groups;
  size_t begin = 0;
  for (size_t i = 0; i < chunks.size(); ++i)
    if (chunks[i].last_c) {
      groups.emplace_back(begin, i + 1);
      begin = i + 1;
    }
  if (begin != chunks.size()) throw std::logic_error("device shares: the plan's last chunk ends no reduction");
  return groups;
}

// The plan over chunks [begin, end): its first chunk loads every input it streams (the device has
// nothing yet); the others keep their flags, as their predecessors are the plan's own.
Plan share_of(const Plan& plan, size_t begin, size_t end) {
  Plan share = plan;
  share.chunks.assign(plan.chunks.begin() + static_cast<std::ptrdiff_t>(begin),
                      plan.chunks.begin() + static_cast<std::ptrdiff_t>(end));
  Chunk& first = share.chunks.front();
  first.load_x = first.load_w = true;
  first.load_y = plan.problem.op != Operation::forward;  // the forward's y is its output, never loaded
  return share;
}

}  // namespace

std::vector<DeviceShare> device_shares(const Plan& plan, int devices, bool can_split_group) {
  if (devices < 1) throw std::logic_error("device shares: no device");
  if (plan.chunks.empty()) throw std::logic_error("device shares: a plan without chunks");
  const auto groups = reduction_groups(plan.chunks);
  std::vector<DeviceShare> shares;
  if (groups.size() == 1 && can_split_group && devices > 1) {
    // One reduction over every chunk: split its chunks, the later parts partial sums.
    const size_t n = plan.chunks.size(), parts = std::min<size_t>(static_cast<size_t>(devices), n);
    for (size_t p = 0; p < parts; ++p) {
      const size_t begin = n * p / parts, end = n * (p + 1) / parts;
      DeviceShare s{share_of(plan, begin, end), p > 0};
      s.plan.chunks.front().first_c = true;  // each part starts its own sum (beta: the caller's, or 0)
      s.plan.chunks.back().last_c = true;
      if (s.partial) s.plan.problem.beta = 0.0;
      shares.push_back(std::move(s));
    }
    return shares;
  }
  // Whole groups, cut where the running chunk count passes each device's even share.
  const size_t parts = std::min<size_t>(static_cast<size_t>(devices), groups.size());
  const size_t n = plan.chunks.size();
  size_t g = 0;
  for (size_t p = 0; p < parts; ++p) {
    const size_t begin = groups[g].first;
    const size_t target = n * (p + 1) / parts;  // chunks before the end of share p, ideally
    size_t end = groups[g++].second;
    // Leave at least one group for each share after this one.
    while (g < groups.size() - (parts - 1 - p) && groups[g].second <= target) end = groups[g++].second;
    shares.push_back({share_of(plan, begin, end), false});
  }
  return shares;
}

}  // namespace ooc
