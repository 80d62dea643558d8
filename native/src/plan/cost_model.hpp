// The cost model: predicted seconds of a plan from its link traffic, compute and chunk count.
// Out-of-core layers are link-bound, so the steady state is the slowest of: H2D bytes, D2H bytes,
// both directions together (they share the link's total), the host workers' gather/scatter of
// pageable tensors, and compute; pipeline fill and drain add one chunk's load and one chunk's
// write-back. Small chunks compute below peak (a GPU needs enough work per launch): each chunk
// costs chunk_half_flops of extra work plus a fixed overhead.
#pragma once

#include <cstddef>

#include "ooc/plan.hpp"

namespace ooc {

struct TrafficEstimate {
  double bytes_h2d = 0, bytes_d2h = 0, flops = 0;
  double num_chunks = 1;
  // Per-chunk implicit-GEMM shape: reduction length (c tile x kernel size) and output channels (k
  // tile). Thin GEMMs run well below peak, so splitting C or K finely costs compute.
  double reduction_depth = 1e9, output_channels = 1e9;
  // A grouped convolution: output_channels counts every group of the chunk, and a chunk of few
  // groups runs further below peak than a dense GEMM of as many channels (kHalfRateGroupedChannels).
  bool grouped = false;
  // Shortest contiguous run (bytes) a chunk's regions are copied in: DMA engines and memcpy move
  // short rows far below bandwidth, so splitting the innermost dimensions is costly.
  double copy_run_bytes = 1e12;
  double first_load_bytes = 0, last_store_bytes = 0;
  int buffers = 3;
};

// The estimate's inputs every plan has: link bytes each way, flops and chunk count (the rest keep
// their defaults until the planner sets them).
inline TrafficEstimate traffic_estimate(double bytes_h2d, double bytes_d2h, double flops, double num_chunks) {
  TrafficEstimate t;
  t.bytes_h2d = bytes_h2d;
  t.bytes_d2h = bytes_d2h;
  t.flops = flops;
  t.num_chunks = num_chunks;
  return t;
}

double predict_seconds(const TrafficEstimate& t, const MachineModel& m);

// The element-wise and per-position layers' estimate (layer_planner.cpp), of a plan already chosen:
// the slowest of either link, both together and compute, plus each chunk's fixed overhead.
double predict_layer_seconds(size_t bytes_h2d, size_t bytes_d2h, double flops, size_t chunks, const MachineModel& m);

// A reduction this long / this many output channels run at half the rate.
constexpr double kHalfRateReductionDepth = 64;
constexpr double kHalfRateOutputChannels = 16;
// cuDNN computes a grouped chunk's groups in one launch, and chunks of few groups run far below
// the rate of chunks of many. Depthwise 3-D on the H100 (bench/results/2026-12-06_d0b889e_device.md):
// forward in chunks of 2 groups took 0.144 s for the layer, compute-bound; backward data, the same
// bytes and flops in chunks of all 64 groups, 0.108 s, at the link's speed. Set so that a chunk of
// all the groups is preferred wherever it fits: the model's times for chunks of few groups are
// pessimistic (2 groups: 1.3 s predicted), for many about right (64: 49 ms; in core 18 ms).
constexpr double kHalfRateGroupedChannels = 256;
constexpr double kHalfRateCopyRunBytes = 1024;

}  // namespace ooc
