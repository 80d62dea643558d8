// cuDNN descriptors and a forward algorithm per chunk shape. A plan's chunks have few distinct
// shapes (interior and edge tiles), so each is described and its algorithm chosen once, not per chunk.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "backend/backend.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"

namespace ooc {

struct ConvSetup {
  TensorDescriptor x, y;
  TensorDescriptor bias;  // [1, k, 1, 1(, 1)]: broadcast over y by cudnnAddTensor
  FilterDescriptor w;
  ConvolutionDescriptor conv;  // math type CUDNN_FMA_MATH: full FP32, never TF32
  cudnnConvolutionFwdAlgo_t algorithm = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_bytes = 0;  // what `algorithm` needs, within the limit it was chosen for
};

class ConvSetupCache {
 public:
  // The setup for `shape` whose algorithm needs at most `workspace_limit` bytes; made on first use.
  ConvSetup& get(cudnnHandle_t handle, const ChunkConv& shape, size_t workspace_limit);
  void clear() noexcept { setups_.clear(); }

 private:
  using Key = std::array<int64_t, 23>;  // every ChunkConv field, then the workspace limit
  static Key key_of(const ChunkConv& shape, size_t workspace_limit);

  std::map<Key, std::unique_ptr<ConvSetup>> setups_;
};

}  // namespace ooc
