#include "backend/host/host_channels_first.hpp"

#include <array>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace ooc {
namespace {

int64_t product(const Dims3& d) { return d[0] * d[1] * d[2]; }

size_t bytes_of(const ChannelsBuffer& b) {
  return static_cast<size_t>(b.outer * b.channels * b.space) * dtype_size(b.dtype);
}

// A channels-first copy of a channels-last buffer (empty for a null one).
std::vector<char> channels_first_copy(const ChannelsBuffer& b) {
  if (!b.data) return {};
  std::vector<char> copy(bytes_of(b));
  transpose_channels(b, b.data, copy.data(), false);
  return copy;
}

constexpr size_t kMaxInputs = 4;  // pool_backward's y, dy, x

}  // namespace

ChannelsBuffer x_buffer(const ChunkConv& s, const void* data) { return {data, s.n, s.c, product(s.in), s.dtype}; }
ChannelsBuffer w_buffer(const ChunkConv& s, const void* data, DType dtype) {
  return {data, s.k, s.c / s.groups, product(s.kernel), dtype};
}
ChannelsBuffer y_buffer(const ChunkConv& s, const void* data) { return {data, s.n, s.k, product(s.out), s.dtype}; }
ChannelsBuffer pooled_buffer(const ChunkConv& s, const void* data) { return {data, s.n, s.c, product(s.out), s.dtype}; }

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

void in_channels_first(Layout layout, std::initializer_list<ChannelsBuffer> inputs, const ChannelsBuffer& out,
                       bool read_out, FunctionRef<void(const void* const* in, void* out)> compute) {
  if (inputs.size() > kMaxInputs) throw std::logic_error("host backend: too many inputs for in_channels_first");
  std::array<const void*, kMaxInputs> in{};
  void* out_data = const_cast<void*>(out.data);
  if (layout == Layout::channels_first) {
    size_t i = 0;
    for (const ChannelsBuffer& b : inputs) in[i++] = b.data;
    return compute(in.data(), out_data);
  }
  std::array<std::vector<char>, kMaxInputs> copies;
  size_t i = 0;
  for (const ChannelsBuffer& b : inputs) {
    copies[i] = channels_first_copy(b);
    in[i] = b.data ? copies[i].data() : nullptr;
    ++i;
  }
  std::vector<char> result = read_out ? channels_first_copy(out) : std::vector<char>(bytes_of(out));
  compute(in.data(), result.data());
  transpose_channels(out, result.data(), out_data, true);
}

}  // namespace ooc
