// The host reference kernels compute channels-first. A channels-last convolution chunk
// (ChunkConv::layout) is transposed into channels-first scratch, computed there, and its output
// transposed back: the host backend's one place for layouts (it is the reference, so plain and
// obviously right beats fast).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.hpp"
#include "backend/function_ref.hpp"

namespace ooc {

// A dense chunk buffer as [outer, channels, space] (channels-first) or [outer, space, channels]
// (channels-last), of `dtype`.
struct ChannelsBuffer {
  int64_t outer = 1, channels = 1, space = 1;
  DType dtype = DType::float32;
};

// Copies `src` in one layout to `dst` in the other: to_channels_last says which way.
void transpose_channels(const ChannelsBuffer& shape, const void* src, void* dst, bool to_channels_last);

// Runs `compute(in1, in2, out)`, a channels-first kernel of `op` over the chunk `s`, on buffers in
// s.layout: for channels-last, the inputs (in2 may be null) and, when beta != 0, the output are
// transposed into channels-first scratch first, and the output transposed back after (backward
// bias's db, a vector, is used in place).
void in_channels_first(const ChunkConv& s, Operation op, const void* in1, const void* in2, void* out, double beta,
                       FunctionRef<void(const void*, const void*, void*)> compute);

}  // namespace ooc
