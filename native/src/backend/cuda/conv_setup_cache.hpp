// cuDNN descriptors and an algorithm per chunk shape and operation (forward, backward data,
// backward filter; backward bias needs none). A plan's chunks have few distinct shapes (interior
// and edge tiles), so each is described and its algorithm chosen once, not per chunk.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "ooc/problem.hpp"

namespace ooc {

// An algorithm of the setup's operation not yet tried at run time: the descriptor's math type it
// runs under, and whether a timing (cudnnFind*Ex) ran it and with what workspace.
struct AlgorithmCandidate {
  int algo = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  bool timed = false;
  size_t timed_workspace = 0;
};

struct ConvSetup {
  TensorDescriptor x, y;  // x / dx and y / dy
  TensorDescriptor bias;  // [1, k, 1, 1(, 1)]: bias broadcast over y by cudnnAddTensor, or db
  // Backward filter of half inputs into a float32 dw: the float32 accumulator, dw's shape as a
  // tensor in the chunk's layout, which cudnnTransformTensor adds the chunk's partial (w_tensor) to.
  TensorDescriptor w_accumulator;
  TensorDescriptor w_tensor;  // w / dw as a tensor in the chunk's layout (for cudnnTransformTensor)
  FilterDescriptor w;     // w / dw
  ConvolutionDescriptor conv;  // math type: conv_math_type's
  // The algorithm of the setup's operation (the others keep their defaults).
  cudnnConvolutionFwdAlgo_t algorithm = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t data_algorithm = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algorithm = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t workspace_bytes = 0;  // what the algorithm needs, within the limit it was chosen for
  bool benchmarked = false;    // the algorithm was timed on real buffers, not only suggested
  // Half-precision data: tensor-core algorithms compute it exactly in FP32; float32 data keeps to
  // full-FP32 (FMA) ones unless the chunk's math mode is tf32.
  bool tensor_cores_allowed = false;
  // Float32 data with TF32 allowed: the descriptor takes the math type cuDNN reported the chosen
  // algorithm for (torch does the same), since an algorithm's TF32 kernels run only under it;
  // `math` is the descriptor's type before any choice, which the fallbacks run with.
  bool adopts_algorithm_math = false;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  // What fall_back takes next when cuDNN refuses the chosen algorithm at run time: the rest of the
  // ranking (heuristic or timed), then every other algorithm of the operation. cuDNN's heuristics
  // and its fixed fallbacks both named algorithms that its NDHWC kernels then refused on the H100.
  std::vector<AlgorithmCandidate> untried;
};

class ConvSetupCache {
 public:
  // The setup for `shape` and `op` whose algorithm needs at most `workspace_limit` bytes; made on
  // first use. References stay valid until trim() or clear().
  ConvSetup& get(cudnnHandle_t handle, const ChunkConv& shape, size_t workspace_limit,
                 Operation op = Operation::forward);
  // Bounds the cache (a process that runs many different problems must not grow it without end):
  // empties it when full. Called before a chunk takes its setups, since a staged chunk holds two.
  void trim();
  void clear() noexcept {
    setups_.clear();
    layout_refusals_.clear();
  }

  // Whether cuDNN refused every algorithm for `shape` and `op` in the chunk's own layout
  // (cuda_backend.cu then runs such chunks on channels-first copies); refuse_layout records it.
  bool refuses_layout(const ChunkConv& shape, Operation op) const;
  void refuse_layout(const ChunkConv& shape, Operation op);

  // After cuDNN refused the chosen algorithm at run time (CUDNN_STATUS_NOT_SUPPORTED, or a
  // workspace larger than it had reported): switches `setup` to the next untried algorithm whose
  // workspace fits the limit. False when none is left.
  static bool fall_back(cudnnHandle_t handle, ConvSetup& setup, Operation op, size_t workspace_limit);

  // Times every algorithm the setup's math type allows of `op` on the chunk's own device buffers (cudnnFind*Ex) and
  // keeps the fastest whose workspace fits: cuDNN's heuristic pick ran the H200 bench layers at
  // half the in-core speed. Overwrites `out`, so it is only called where the output is about to be
  // overwritten anyway (beta == 0). Inputs in the backend's argument order: forward (x, w, y),
  // backward data (dy, w, dx), backward filter (x, dy, dw).
  static void benchmark(cudnnHandle_t handle, ConvSetup& setup, Operation op, const void* in1, const void* in2,
                        void* out, void* workspace, size_t workspace_limit);

 private:
  using Key = std::array<int64_t, 29>;  // every ChunkConv field, the workspace limit, the operation
  static Key key_of(const ChunkConv& shape, size_t workspace_limit, Operation op);

  std::map<Key, std::unique_ptr<ConvSetup>> setups_;
  std::set<Key> layout_refusals_;  // keys with a workspace limit of 0: the refusal is the shape's
};

}  // namespace ooc
