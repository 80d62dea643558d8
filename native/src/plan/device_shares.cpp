#include "plan/device_shares.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "plan/cost_model.hpp"

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

// Where share p of `parts` should end, ideally: n chunks times the weights of shares 0..p over
// those of all `parts` shares.
std::vector<double> ideal_ends(const std::vector<double>& weights, size_t parts, size_t n) {
  double total = 0;
  for (size_t p = 0; p < parts; ++p) total += weights[p];
  std::vector<double> ends(parts);
  double running = 0;
  for (size_t p = 0; p < parts; ++p) {
    running += weights[p];
    ends[p] = static_cast<double>(n) * running / total;
  }
  ends.back() = static_cast<double>(n);
  return ends;
}

}  // namespace

std::vector<DeviceShare> device_shares(const Plan& plan, const std::vector<double>& weights, bool can_split_group) {
  if (weights.empty()) throw std::logic_error("device shares: no device");
  for (double w : weights)
    if (!(w > 0) || !std::isfinite(w)) throw std::logic_error("device shares: a device's weight is not positive");
  if (plan.chunks.empty()) throw std::logic_error("device shares: a plan without chunks");
  const auto groups = reduction_groups(plan.chunks);
  const size_t devices = weights.size(), n = plan.chunks.size();
  std::vector<DeviceShare> shares;
  if (groups.size() == 1 && can_split_group && devices > 1) {
    // One reduction over every chunk: split its chunks, the later parts partial sums.
    const size_t parts = std::min(devices, n);
    const std::vector<double> ends = ideal_ends(weights, parts, n);
    size_t begin = 0;
    for (size_t p = 0; p < parts; ++p) {
      // At least one chunk here and one for each share after this one.
      const size_t end = std::clamp<size_t>(static_cast<size_t>(std::llround(ends[p])), begin + 1, n - (parts - 1 - p));
      DeviceShare s{share_of(plan, begin, end), p > 0};
      s.plan.chunks.front().first_c = true;  // each part starts its own sum (beta: the caller's, or 0)
      s.plan.chunks.back().last_c = true;
      if (s.partial) s.plan.problem.beta = 0.0;
      shares.push_back(std::move(s));
      begin = end;
    }
    return shares;
  }
  // Whole groups, cut where the running chunk count passes each device's weighted share.
  const size_t parts = std::min(devices, groups.size());
  const std::vector<double> ends = ideal_ends(weights, parts, n);
  size_t g = 0;
  for (size_t p = 0; p < parts; ++p) {
    const size_t begin = groups[g].first;
    size_t end = groups[g++].second;
    // Take the next group while that brings the end nearer the ideal, leaving at least one group
    // for each share after this one.
    while (g < groups.size() - (parts - 1 - p) &&
           std::abs(static_cast<double>(groups[g].second) - ends[p]) <= std::abs(static_cast<double>(end) - ends[p]))
      end = groups[g++].second;
    shares.push_back({share_of(plan, begin, end), false});
  }
  return shares;
}

std::vector<DeviceShare> device_shares(const Plan& plan, int devices, bool can_split_group) {
  if (devices < 1) throw std::logic_error("device shares: no device");
  return device_shares(plan, std::vector<double>(static_cast<size_t>(devices), 1.0), can_split_group);
}

std::vector<double> device_speeds(const Plan& plan, const std::vector<MachineModel>& machines) {
  std::vector<double> speeds;
  for (const MachineModel& m : machines) {
    const double seconds = predict_layer_seconds(plan.bytes_h2d, plan.bytes_d2h, plan.problem.flops() * plan.passes,
                                                 plan.num_chunks(), m);
    speeds.push_back(seconds > 0 && std::isfinite(seconds) ? 1.0 / seconds : 1.0);
  }
  return speeds;
}

}  // namespace ooc
