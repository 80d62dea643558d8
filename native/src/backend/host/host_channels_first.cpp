#include "backend/host/host_channels_first.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

namespace ooc {
namespace {

int64_t product(const Dims3& d) { return d[0] * d[1] * d[2]; }

// The chunk's buffers of each tensor family: x [n, c, in], w [k, c / groups, kernel], y [n, k, out].
ChannelsBuffer x_buffer(const ChunkConv& s) { return {s.n, s.c, product(s.in), s.dtype}; }
ChannelsBuffer w_buffer(const ChunkConv& s, DType dtype) { return {s.k, s.c / s.groups, product(s.kernel), dtype}; }
ChannelsBuffer y_buffer(const ChunkConv& s) { return {s.n, s.k, product(s.out), s.dtype}; }

size_t bytes_of(const ChannelsBuffer& b) {
  return static_cast<size_t>(b.outer * b.channels * b.space) * dtype_size(b.dtype);
}

// A channels-first copy of a channels-last buffer (none for a null one).
std::vector<char> channels_first_copy(const ChannelsBuffer& shape, const void* src) {
  if (!src) return {};
  std::vector<char> copy(bytes_of(shape));
  transpose_channels(shape, src, copy.data(), false);
  return copy;
}

}  // namespace

void transpose_channels(const ChannelsBuffer& b, const void* src, void* dst, bool to_channels_last) {
  const size_t es = dtype_size(b.dtype);
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst);
  for (int64_t o = 0; o < b.outer; ++o) {
    const int64_t base = o * b.channels * b.space;
    for (int64_t c = 0; c < b.channels; ++c)
      for (int64_t p = 0; p < b.space; ++p) {
        const int64_t first = base + c * b.space + p, last = base + p * b.channels + c;
        std::memcpy(to + (to_channels_last ? last : first) * es, from + (to_channels_last ? first : last) * es, es);
      }
  }
}

void in_channels_first(const ChunkConv& s, Operation op, const void* in1, const void* in2, void* out, double beta,
                       FunctionRef<void(const void*, const void*, void*)> compute) {
  if (s.layout == Layout::channels_first) return compute(in1, in2, out);
  ChannelsBuffer a, b, o;
  bool out_is_vector = false;
  switch (op) {
    case Operation::forward: a = x_buffer(s), b = w_buffer(s, s.dtype), o = y_buffer(s); break;
    case Operation::backward_data: a = y_buffer(s), b = w_buffer(s, s.dtype), o = x_buffer(s); break;
    case Operation::backward_filter: a = x_buffer(s), b = y_buffer(s), o = w_buffer(s, s.out_dtype); break;
    case Operation::backward_bias: a = y_buffer(s), out_is_vector = true; break;
    default: throw std::logic_error("host backend: not a convolution in a channels-last chunk");
  }
  const std::vector<char> first = channels_first_copy(a, in1), second = channels_first_copy(b, in2);
  if (out_is_vector) return compute(first.data(), nullptr, out);
  std::vector<char> result = beta != 0.0 ? channels_first_copy(o, out) : std::vector<char>(bytes_of(o));
  compute(first.data(), in2 ? second.data() : nullptr, result.data());
  transpose_channels(o, result.data(), out, true);
}

}  // namespace ooc
