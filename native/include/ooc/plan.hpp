// A Plan says how one operation runs out of core: the split, the chunks in execution order, what
// each chunk loads, device bytes at peak, link traffic and the predicted time. Pure data: printable
// and testable without a GPU. Made by plan_conv_forward (ooc.hpp), executed by the pipeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ooc/problem.hpp"

namespace ooc {

// Half-open index range [begin, end).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
  bool operator!=(const Range& o) const { return !(*this == o); }
};

// Tile sizes (the last tile of a dimension may be smaller: uneven edges).
struct Tiling {
  int64_t n = 1, k = 1, c = 1;
  Dims3 out{1, 1, 1};
};

// Which tensor the outer loop walks, i.e. which one is reused across the inner loop.
//   k_outer:  for k-tile { for n/spatial-tile { for c-tile } }  — w tiles stay, x is re-read per k-tile
//   ns_outer: for n/spatial-tile { for k-tile { for c-tile } }  — x tiles stay, w is re-read per n/spatial-tile
// C (the reduction) is always innermost so the partial y stays on the device while it accumulates.
enum class LoopOrder { k_outer, ns_outer };
const char* loop_order_name(LoopOrder order);

// One unit of work: computes y[n, k, out] (partially, over channels c).
struct Chunk {
  Range n, k, c;
  std::array<Range, kMaxSpatial> out;     // output region
  std::array<Range, kMaxSpatial> in;      // input region it reads, halo included; may leave the tensor (zeros)
  Dims3 compute_padding{0, 0, 0};         // padding cuDNN applies itself (only for dims that are not split)
  bool load_x = true, load_w = true;      // false: same region as the previous chunk, still on the device
  bool first_c = true, last_c = true;     // first: scale y by the caller's beta; last: add bias, write y back
};

struct MachineModel {
  double h2d_bytes_per_s = 5e9;
  double d2h_bytes_per_s = 5e9;
  double bidir_bytes_per_s = 5e9;       // both directions at once, total
  double host_copy_bytes_per_s = 5e9;   // gather + scatter of pageable tensors by the host workers
  double flops_per_s = 2e9;
  double chunk_half_flops = 1e6;        // a chunk of this many flops runs at half the peak rate
  double chunk_overhead_s = 2e-5;       // fixed cost per chunk: launches, events, descriptors
  bool copies_share_compute = false;    // host backend: the same cores copy and compute
};

struct Plan {
  ConvProblem problem;
  std::string backend;          // "host" or "cuda"
  Tiling tiling;
  int64_t splits_n = 1, splits_k = 1, splits_c = 1;
  Dims3 splits_out{1, 1, 1};
  LoopOrder order = LoopOrder::ns_outer;
  int buffers = 3;              // device slots for y (and x, w when streamed): load next / compute / write back
  int x_buffers = 3;            // 1 when x is loaded once
  int w_buffers = 3;            // 1 when w is loaded once and stays resident
  bool w_resident = false;
  size_t x_slot_bytes = 0, w_slot_bytes = 0, y_slot_bytes = 0, bias_bytes = 0, workspace_bytes = 0;  // slots 256-byte aligned
  size_t peak_device_bytes = 0;
  size_t memory_limit = 0;
  size_t bytes_h2d = 0, bytes_d2h = 0;
  double predicted_seconds = 0;
  MachineModel machine;
  std::vector<Chunk> chunks;

  size_t num_chunks() const { return chunks.size(); }
  std::string describe() const;  // multi-line, human readable
};

}  // namespace ooc
