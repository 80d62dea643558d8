#include <limits>

#include "plan/cost_model.hpp"
#include "plan/layer_planners.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {

using namespace planner_parts;

Plan plan_batchnorm_for(const ConvProblem& p, const PlannerConfig& cfg) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const bool backward = p.op == Operation::batchnorm_backward;
  const int passes = p.op == Operation::batchnorm_forward_inference ? 1 : 2;
  const std::array<int64_t, 5> extent{p.n, p.c, p.in[0], p.in[1], p.in[2]};
  const double x_bytes = static_cast<double>(p.n) * p.c * p.in[0] * p.in[1] * p.in[2] * es;
  // Per-channel coefficients, resident: (scale, shift) for the forward, 3 per channel for dx.
  const size_t coef_slot = slot_bytes(p.c * (backward ? 3 : 2), es);

  // Tilings from the whole tensor down: halve n first (its tiles keep the longest contiguous
  // runs), then c, then each spatial dim from the outside in.
  std::vector<std::array<int64_t, 5>> tilings{extent};
  for (int d = 0; d < 5; ++d)
    for (int64_t t : candidate_tiles(extent[d])) {
      if (t == extent[d]) continue;
      std::array<int64_t, 5> next = tilings.back();
      next[d] = t;
      tilings.push_back(next);
    }

  Plan best;
  best.predicted_seconds = std::numeric_limits<double>::infinity();
  size_t smallest_peak = std::numeric_limits<size_t>::max();
  for (const auto& tile : tilings) {
    const int64_t elements = tile[0] * tile[1] * tile[2] * tile[3] * tile[4];
    int64_t chunks = 1;
    for (int d = 0; d < 5; ++d) chunks *= ceil_div(extent[d], tile[d]);
    if (elements > kMaxChunkElements || static_cast<size_t>(chunks) > kMaxChunks) continue;
    for (int bufs : {3, 2, 1}) {
      if (bufs > 1 && chunks == 1) continue;
      const size_t x_slot = slot_bytes(elements, es);
      // The output slot also holds a pass-1 chunk's per-channel pair (mean, M2 or the grad sums).
      const size_t out_slot = std::max(x_slot, slot_bytes(2 * tile[1], es));
      const size_t peak = bufs * x_slot * (backward ? 2 : 1) + bufs * out_slot + coef_slot;
      if (peak > cfg.memory_limit) {
        smallest_peak = std::min(smallest_peak, peak);
        continue;
      }
      const double in_bytes = x_bytes * (backward ? 2 : 1);
      const double partial_bytes = passes == 2 ? chunks * 2.0 * tile[1] * es : 0;
      TrafficEstimate t;
      t.bytes_h2d = passes * in_bytes + coef_slot + (p.beta != 0.0 ? x_bytes : 0.0);  // beta: y / dx loaded
      t.bytes_d2h = x_bytes + partial_bytes;
      t.flops = (backward ? 8.0 : 5.0) * x_bytes / es;
      t.num_chunks = static_cast<double>(chunks * passes);
      t.copy_run_bytes = es * contiguous_run(tile, extent);
      t.first_load_bytes = static_cast<double>(x_slot);
      t.last_store_bytes = static_cast<double>(x_slot);
      t.buffers = bufs;
      const double seconds = predict_seconds(t, cfg.machine);
      if (seconds >= best.predicted_seconds) continue;
      best = Plan{};
      best.predicted_seconds = seconds;
      best.tiling.n = tile[0];
      best.tiling.c = best.tiling.k = tile[1];
      best.tiling.out = {tile[2], tile[3], tile[4]};
      best.buffers = best.x_buffers = best.y_buffers = bufs;
      best.w_buffers = backward ? bufs : 0;
      best.bias_buffers = 1;
      best.x_slot_bytes = x_slot;
      best.w_slot_bytes = backward ? x_slot : 0;
      best.y_slot_bytes = out_slot;
      best.bias_bytes = coef_slot;
      best.peak_device_bytes = peak;
      best.bytes_h2d = static_cast<size_t>(t.bytes_h2d);
      best.bytes_d2h = static_cast<size_t>(t.bytes_d2h);
    }
  }
  if (best.peak_device_bytes == 0) throw_out_of_budget(p, cfg.memory_limit, smallest_peak, false);

  best.problem = p;
  best.backend = cfg.backend;
  best.machine = cfg.machine;
  best.memory_limit = cfg.memory_limit;
  best.passes = passes;
  const std::array<int64_t, 5> tile{best.tiling.n, best.tiling.c, best.tiling.out[0], best.tiling.out[1],
                                    best.tiling.out[2]};
  std::array<int64_t, 5> splits{};
  for (int d = 0; d < 5; ++d) splits[d] = ceil_div(extent[d], tile[d]);
  best.splits_n = splits[0];
  best.splits_c = best.splits_k = splits[1];
  best.splits_out = {splits[2], splits[3], splits[4]};
  auto range = [&](int d, int64_t i) { return Range{i * tile[d], std::min(extent[d], (i + 1) * tile[d])}; };
  int64_t index = 0;
  for (int64_t a = 0; a < splits[0]; ++a)
    for (int64_t b = 0; b < splits[1]; ++b)
      for (int64_t s0 = 0; s0 < splits[2]; ++s0)
        for (int64_t s1 = 0; s1 < splits[3]; ++s1)
          for (int64_t s2 = 0; s2 < splits[4]; ++s2) {
            Chunk ch;
            ch.n = range(0, a);
            ch.c = range(1, b);
            ch.k = {index, index + 1};
            ++index;
            ch.in = ch.out = {range(2, s0), range(3, s1), range(4, s2)};
            ch.load_y = backward;
            best.chunks.push_back(ch);
          }
  return best;
}

}  // namespace ooc
