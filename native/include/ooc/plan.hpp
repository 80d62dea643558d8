// A Plan says how one operation runs out of core: the split, the chunks in execution order, what
// each chunk loads, device bytes at peak, link traffic and the predicted time. Pure data: printable
// and testable without a GPU. Made by plan_conv_forward and its backward twins (ooc.hpp), executed
// by the pipeline. The four operations share this vocabulary: regions are named by the tensor
// family they index (x-shaped: x, dx; w-shaped: w, dw; y-shaped: y, dy; bias-shaped: bias, db).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ooc/problem.hpp"
#include "ooc/types.hpp"

namespace ooc {

// Half-open index range [begin, end).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
  bool operator!=(const Range& o) const { return !(*this == o); }
};

// Tile sizes (the last tile of a dimension may be smaller: uneven edges). Spatial tiles are over
// y / dy (forward, backward filter and bias) or over dx (backward data). A grouped convolution is
// tiled along g (groups per tile) and k, c inside a group tile (conv_geometry.hpp's
// GroupedChannels); k and c are then channel counts of a tile, a group tile of several groups
// holding its groups' channels whole. Ungrouped: g = 1.
struct Tiling {
  int64_t n = 1, k = 1, c = 1;
  Dims3 out{1, 1, 1};
  int64_t g = 1;
};

// Which tensor the outer loop walks, i.e. which one is reused across the inner loop.
//   k_outer:  for k-tile { for n/spatial-tile { for c-tile } }  — w tiles stay, x is re-read per k-tile
//   ns_outer: for n/spatial-tile { for k-tile { for c-tile } }  — x tiles stay, w is re-read per n/spatial-tile
// C (the reduction) is always innermost so the partial y stays on the device while it accumulates.
// The backward operations use the same names for their loop nests, the reduction innermost:
//   backward data (reduction over k):  ns_outer: for n/spatial { for c { for k } };  c_outer: for c { for n/spatial { for k } }
//   backward filter (over n, spatial): k_outer: for k { for c { for n/spatial } };  c_outer: for c { for k { for n/spatial } }
//   backward bias (over n, spatial):   k_outer: for k { for n/spatial }
enum class LoopOrder { k_outer, ns_outer, c_outer };
const char* loop_order_name(LoopOrder order);

// One unit of work. Forward: computes y[n, k, out] (partially, over channels c). Backward data:
// dx[n, c, target] (partially, over k). Backward filter: dw[k, c] (partially, over n and out).
// Backward bias: db[k] (partially, over n and out).
struct Chunk {
  Range n, k, c;
  // y / dy region: forward: computed; backward filter, bias: read; backward data: the dy rows on
  // the device, of which only `out_read` is loaded (the rest are zeros, see backward_data_rows).
  std::array<Range, kMaxSpatial> out;
  // x / dx region: forward, backward filter: read, halo included, may leave the tensor (zeros);
  // backward data: the dx region computed (a dense device buffer), may leave the tensor.
  std::array<Range, kMaxSpatial> in;
  std::array<Range, kMaxSpatial> target;    // backward data: the dx rows written back (disjoint tiles, inside in)
  std::array<Range, kMaxSpatial> out_read;  // backward data: the dy rows loaded (those contributing to target)
  Dims3 compute_padding{0, 0, 0};         // padding cuDNN applies itself (only for dims that are not split)
  bool load_x = true, load_w = true;      // false: same region as the previous chunk, still on the device
  bool load_y = false;                    // backward: the same for dy (forward: false, y is the output)
  // First / last chunk of the reduction into this chunk's output tile (over c for the forward, k
  // for backward data, n and out for backward filter and bias). first: scale the output by the
  // caller's beta; last: add bias (forward), write the output back.
  bool first_c = true, last_c = true;
};

// The members of a Chunk an operation reads, for naming them (Plan::chunk_fields).
enum class ChunkMember { n, k, c, out, in, target, out_read, load_x, load_w, load_y, first_c, last_c };
// One member of an operation's chunks under the name the operation gives it ("dy", "load_dy", ...).
struct ChunkField {
  const char* name;
  ChunkMember member;
};

// One piece of a run's device memory, as the planner laid it out (Plan::slots).
//   streamed: a ring of `buffers` slots of `bytes` each that chunks load into or store from (one
//             slot: loaded once and kept, e.g. a resident w);
//   kept:     an output reduced on the device over the whole run (dw, db), `offset` bytes into the
//             block of kept_bytes;
//   scratch:  partial results carried from one chunk to a later one (dx rows two tiles share, a
//             pooled tile), `offset` bytes into the block of scratch_bytes.
enum class SlotKind { streamed, kept, scratch };
const char* slot_kind_name(SlotKind kind);
struct SlotPlan {
  std::string name;  // the tensor(s) it holds: "x", "dy, y", "dw[0]", "carried dx[1]", ...
  SlotKind kind = SlotKind::streamed;
  int buffers = 1;
  size_t bytes = 0;  // per buffer, 256-byte aligned
  size_t offset = 0;
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

// A candidate the planner's search costed (candidate_search.hpp), for logging why a plan won.
struct CandidateSummary {
  double predicted_seconds = 0;
  size_t peak_device_bytes = 0;
  double chunks = 0;
};

struct Plan {
  ConvProblem problem;          // problem.op says which operation
  std::string backend;          // "host" or "cuda"
  MathMode math = MathMode::fp32;  // the call's Options::math, which its float32 chunks compute with
  Tiling tiling;
  int64_t splits_g = 1, splits_n = 1, splits_k = 1, splits_c = 1;  // k, c: tiles inside one group tile
  Dims3 splits_out{1, 1, 1};
  LoopOrder order = LoopOrder::ns_outer;
  int buffers = 3;              // pipeline depth: load next / compute / write back (forward: also y's slot count)
  int x_buffers = 3;            // slots for x / dx; 1 when loaded once (or one output tile)
  int w_buffers = 3;            // slots for w / dw; 1 when w is loaded once and stays resident
  int y_buffers = 3;            // slots for y / dy
  int bias_buffers = 0;         // slots for bias / db (bias_bytes is all of them)
  bool w_resident = false;
  // Slots are 256-byte aligned; bias_bytes counts every bias / db slot.
  size_t x_slot_bytes = 0, w_slot_bytes = 0, y_slot_bytes = 0, bias_bytes = 0, workspace_bytes = 0;
  size_t peak_device_bytes = 0;
  size_t memory_limit = 0;
  size_t bytes_h2d = 0, bytes_d2h = 0;
  double predicted_seconds = 0;
  // Passes over the chunk list: 2 for batch-norm training and backward (statistics, then apply).
  int passes = 1;
  MachineModel machine;
  std::vector<Chunk> chunks;
  // Fused functions (fused.hpp): the function's name ("" for a single operation; problem.op is then
  // the operation whose chunk vocabulary the plan uses), and their device memory beyond the slots
  // above (all counted in peak_device_bytes): slots of an output streamed beside an input of its
  // family (dx beside x), outputs kept on the device for the whole run (dw, db), and scratch (the
  // dx rows two spatial tiles share, carried from one to the next; a pooled tile).
  std::string fused;
  int y_inputs = 1;  // y-shaped tensors streamed through y's slots, y_buffers each (dy; y; the activation's input)
  int pooled_inputs = 0;  // pooled tensors (dq, q) streamed beside them, y_buffers slots of pooled_slot_bytes each
  size_t pooled_slot_bytes = 0;
  int out_buffers = 0;
  size_t out_slot_bytes = 0, kept_bytes = 0, scratch_bytes = 0;
  // The fastest candidates that fitted the budget, fastest first (the winner's figures first), and
  // how many fitted in all: what the plan beat, for the pyooc logger at DEBUG.
  std::vector<CandidateSummary> candidates;
  int64_t candidates_fitting = 0;

  // Every piece of device memory but the workspace, named after the operation's tensors: with
  // workspace_bytes they add up to peak_device_bytes. Computed once by the planner (plan/slot_table.hpp);
  // describe() prints it, Python's Plan.slots reads it, the pipeline takes offsets from it.
  std::vector<SlotPlan> slots;

  size_t num_chunks() const { return chunks.size(); }
  // The slot called `name`; throws std::logic_error when the plan has none.
  const SlotPlan& slot(const std::string& name) const;
  // What this plan's chunks hold, named after its operation's tensors, in one table for every
  // operation and fused function (plan/chunk_fields.cpp); Python's Plan.chunks reads it.
  std::vector<ChunkField> chunk_fields() const;
  std::string describe() const;  // multi-line, human readable
};

}  // namespace ooc
