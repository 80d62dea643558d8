// The pipeline every operation runs (forward convolution and its gradients alike): for each chunk
// of a plan, load its input regions into device slots (host workers gather pageable tensors into
// staging buffers; pinned ones go by direct DMA), compute on the compute queue, and on the last
// chunk of a reduction copy the output out and scatter it into the caller's tensor. Events chain
// the queues so that chunk i+1 loads while chunk i computes and chunk i-1 writes back. An
// operation says only which regions its chunks move and what they compute (OperationSpec).
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.hpp"
#include "exec/region_copy.hpp"
#include "exec/thread_pool.hpp"
#include "ooc/ooc.hpp"

namespace ooc {

// A box of a tensor view. Loads zero what lies outside the view; stores write back only the part
// inside it (views may be windows: TensorView::window).
struct Region {
  TensorView view;
  Box box;
};

// One tensor as the pipeline streams it: where the caller's memory is (decides DMA or staging) and
// its device slots.
struct StreamedTensor {
  const void* data = nullptr;
  int slots = 0;  // 0: the operation has no such tensor
  size_t slot_bytes = 0;
};

// The device memory one chunk's compute sees (OperationSpec::compute_fused).
struct ChunkBuffers {
  const float *a = nullptr, *b = nullptr, *third = nullptr, *resident = nullptr;
  float* out = nullptr;
  std::vector<const float*> extra;  // OperationSpec::extra's current slots, in order
  char* kept = nullptr;  // OperationSpec::kept's memory
  void* scratch = nullptr;
  void* workspace = nullptr;
  double beta = 0;       // the caller's on a reduction's first chunk, then 1
};

struct OperationSpec {
  StreamedTensor a, b;  // inputs (b.slots == 0: only a)
  StreamedTensor out;   // the output, accumulated over the chunks of a reduction (Chunk::first_c/last_c)
  double beta = 0;      // the caller's, applied on the first chunk of each reduction (then 1)
  // Loaded once before the chunks and kept (the forward's bias); resident_bytes == 0: none.
  Region resident;
  size_t resident_bytes = 0;
  size_t workspace_bytes = 0;
  std::function<Region(const Chunk&)> a_region, b_region, out_region;
  std::function<bool(const Chunk&)> a_loads, b_loads;  // false: the previous chunk's region is still there
  // Issues one chunk's compute on Queue::compute; beta: the caller's or 1 (see above).
  std::function<void(const Chunk&, const float* a, const float* b, const float* resident, float* out, double beta,
                     void* workspace)>
      compute;
  // A third input (third.slots == 0: none), for operations that read three tensors per chunk
  // (activation backward: y, dy, x); then compute3 runs instead of compute.
  StreamedTensor third;
  std::function<Region(const Chunk&)> third_region;
  std::function<void(const Chunk&, const float* a, const float* b, const float* third, float* out, double beta)>
      compute3;

  // Where the first chunk of a reduction loads its output tile from when beta != 0: init_region
  // of init_data (a fused forward's z) instead of the output itself. init_data == nullptr: the output.
  const void* init_data = nullptr;
  std::function<Region(const Chunk&)> init_region;

  // Fused operations (exec/fused_pipeline.cpp) keep more on the device than one streamed output.
  std::function<bool(const Chunk&)> third_loads;  // unset: third loads on every chunk
  // More inputs, streamed like a and b (compute_fused only).
  struct ExtraInput {
    StreamedTensor tensor;
    std::function<Region(const Chunk&)> region;
    std::function<bool(const Chunk&)> loads;
  };
  std::vector<ExtraInput> extra;
  // Outputs that stay on the device for the whole run, accumulated by the chunks and written back
  // once after the last one: each a dense box of the `kept` memory, `offset` bytes into it.
  struct Kept {
    Region region;
    size_t offset = 0;
  };
  std::vector<Kept> kept;
  size_t kept_bytes = 0;
  size_t scratch_bytes = 0;  // device memory chunks carry partial results in, from one to a later one
  // When set, runs instead of compute / compute3, seeing every buffer of the chunk.
  std::function<void(const Chunk&, const ChunkBuffers&)> compute_fused;
};

RunStats run_chunks(const Plan& plan, Backend& backend, ThreadPool& pool, const OperationSpec& spec);

// The chunk's shapes as the compute kernel sees them (backend.hpp's ChunkConv).
ChunkConv chunk_shape(const Chunk& ch, const ConvProblem& p);

}  // namespace ooc
