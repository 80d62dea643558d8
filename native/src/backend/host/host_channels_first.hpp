// The host reference kernels compute channels-first. A channels-last chunk (ChunkConv::layout) is
// transposed into channels-first scratch, computed there, and its output transposed back: the host
// backend's one place for layouts (it is the reference, so plain and obviously right beats fast).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "backend/backend.hpp"
#include "backend/function_ref.hpp"

namespace ooc {

// A dense chunk buffer seen as [outer, channels, space] (channels-first) or [outer, space,
// channels] (channels-last) elements of `dtype`. A vector (a bias, db) has channels == 1.
struct ChannelsBuffer {
  const void* data = nullptr;
  int64_t outer = 1, channels = 1, space = 1;
  DType dtype = DType::float32;
};

// The buffers of a convolution chunk's tensor families: x [n, c, in], w [k, c / groups, kernel]
// (dw: of s.out_dtype), y [n, k, out]; a pooling chunk's output [n, c, out].
ChannelsBuffer x_buffer(const ChunkConv& s, const void* data);
ChannelsBuffer w_buffer(const ChunkConv& s, const void* data, DType dtype);
ChannelsBuffer y_buffer(const ChunkConv& s, const void* data);
ChannelsBuffer pooled_buffer(const ChunkConv& s, const void* data);

// Copies `src` in one layout to `dst` in the other: to_channels_last says which way.
void transpose_channels(const ChannelsBuffer& shape, const void* src, void* dst, bool to_channels_last);

// Runs compute(in, out), a channels-first kernel, on buffers in `layout`: for channels-last the
// inputs (a null one stays null) and, when read_out (beta != 0), the output are transposed into
// channels-first scratch first, and the output transposed back after.
void in_channels_first(Layout layout, std::initializer_list<ChannelsBuffer> inputs, const ChannelsBuffer& out,
                       bool read_out, FunctionRef<void(const void* const* in, void* out)> compute);

}  // namespace ooc
