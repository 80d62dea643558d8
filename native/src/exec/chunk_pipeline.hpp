// The pipeline every operation runs (forward convolution and its gradients alike): for each chunk
// of a plan, load its input regions into device slots (host workers gather pageable tensors into
// staging buffers; pinned ones go by direct DMA), compute on the compute queue, and on the last
// chunk of a reduction copy the output out and scatter it into the caller's tensor. Events chain
// the queues so that chunk i+1 loads while chunk i computes and chunk i-1 writes back. An
// operation says only which regions its chunks move and what they compute (OperationSpec).
#pragma once

#include <array>
#include <functional>
#include <vector>

#include "backend/backend.hpp"
#include "exec/region_copy.hpp"
#include "util/thread_pool.hpp"
#include "ooc/types.hpp"

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

// An input streamed chunk by chunk: its caller memory and device slots, the region each chunk
// needs and whether the chunk loads it (false: the previous chunk's region is still there).
struct StreamedInput {
  StreamedTensor tensor;
  std::function<Region(const Chunk&)> region;
  std::function<bool(const Chunk&)> loads;  // unset: every chunk loads
  // Gathered by host workers even when the caller's memory is pinned: its regions' halo holds
  // what a border mode computes (TensorView::border), which DMA cannot copy. We route the whole
  // tensor through staging rather than issue extra DMA copies from the mapped regions: one exact
  // mapping in one place (gather_box), where a 3-D box's reflected halo would take a copy per
  // halo row and column of every face, edge and corner.
  bool host_gather = false;
};

// The most inputs one operation streams (the pooled fused backward: dq, x, w, q, y, pre).
constexpr int kMaxStreamedInputs = 8;

// The device memory one chunk's compute sees.
struct ChunkBuffers {
  // Device memory of the problem's dtype (the backend reads elements; the pipeline moves bytes).
  std::array<const void*, kMaxStreamedInputs> in{};  // OperationSpec::inputs' current slots, in order
  int inputs = 0;                                     // how many of `in` the operation has
  const void* resident = nullptr;
  void* out = nullptr;
  char* kept = nullptr;  // OperationSpec::kept's memory
  void* scratch = nullptr;
  void* workspace = nullptr;
  double beta = 0;  // the caller's on a reduction's first chunk, then 1
};

// What an operation streams and computes; run_chunks does the rest. Inputs load in their order
// here, before the chunk's output is (re)started; compute then sees every buffer of the chunk.
struct OperationSpec {
  std::vector<StreamedInput> inputs;
  StreamedTensor out;  // the output, accumulated over the chunks of a reduction (Chunk::first_c/last_c)
  std::function<Region(const Chunk&)> out_region;
  double beta = 0;     // the caller's, applied on the first chunk of each reduction (then 1)
  // Loaded once before the chunks and kept (the forward's bias); resident_bytes == 0: none.
  Region resident;
  size_t resident_bytes = 0;
  size_t workspace_bytes = 0;
  // Where the first chunk of a reduction loads its output tile from when beta != 0: init_region
  // of init_data (a fused forward's z) instead of the output itself. init_data == nullptr: the output.
  const void* init_data = nullptr;
  std::function<Region(const Chunk&)> init_region;
  // Outputs that stay on the device for the whole run, accumulated by the chunks and written back
  // once after the last one: each a dense box of the `kept` memory, `offset` bytes into it.
  struct Kept {
    Region region;
    size_t offset = 0;
  };
  std::vector<Kept> kept;
  size_t kept_bytes = 0;
  size_t scratch_bytes = 0;  // device memory chunks carry partial results in, from one to a later one
  // Issues one chunk's compute on Queue::compute.
  std::function<void(const Chunk&, const ChunkBuffers&)> compute;

  // Appends an input; returns its index in ChunkBuffers::in.
  int add_input(const StreamedTensor& tensor, std::function<Region(const Chunk&)> region,
                std::function<bool(const Chunk&)> loads = {}) {
    inputs.push_back({tensor, std::move(region), std::move(loads)});
    return static_cast<int>(inputs.size()) - 1;
  }
};

RunStats run_chunks(const Plan& plan, Backend& backend, ThreadPool& pool, const OperationSpec& spec);

// `data` advanced by `elements` elements of `dtype` (the start of a part of a device buffer).
inline const void* advanced(const void* data, int64_t elements, DType dtype) {
  return data ? static_cast<const char*>(data) + elements * static_cast<int64_t>(dtype_size(dtype)) : nullptr;
}
inline void* advanced(void* data, int64_t elements, DType dtype) {
  return data ? static_cast<char*>(data) + elements * static_cast<int64_t>(dtype_size(dtype)) : nullptr;
}
// The chunk's shapes as the compute kernel sees them (backend.hpp's ChunkConv), with the plan's
// math mode.
ChunkConv chunk_shape(const Chunk& ch, const Plan& plan);

}  // namespace ooc
