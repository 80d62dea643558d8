// The cost model: predicted seconds of a plan from its link traffic, compute and chunk count.
// Out-of-core layers are link-bound, so the steady state is the slowest of: H2D bytes, D2H bytes,
// both directions together (they share the link's total), and compute; pipeline fill and drain
// add one chunk's load and one chunk's write-back; every chunk adds a fixed overhead.
#pragma once

#include <cstddef>

#include "ooc/plan.hpp"

namespace ooc {

struct TrafficEstimate {
  double bytes_h2d = 0, bytes_d2h = 0, flops = 0;
  double num_chunks = 1;
  double first_load_bytes = 0, last_store_bytes = 0;
  int buffers = 3;
};

double predict_seconds(const TrafficEstimate& t, const MachineModel& m);

}  // namespace ooc
