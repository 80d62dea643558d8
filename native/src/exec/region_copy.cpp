#include "exec/region_copy.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ooc {

TensorView TensorView::contiguous(const void* data, const std::array<int64_t, kMaxRank>& shape, int rank,
                                  size_t element_size) {
  TensorView v;
  v.data = const_cast<void*>(data);
  v.rank = rank;
  v.shape = shape;
  v.element_size = element_size;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    v.strides[i] = stride;
    stride *= shape[i];
  }
  return v;
}

int64_t Box::elements(int rank) const {
  int64_t e = 1;
  for (int i = 0; i < rank; ++i) e *= hi[i] - lo[i];
  return e;
}

namespace {

// The box seen as rows: dims [0, row_dim) index rows; a row is dim row_dim's extent times the
// merged, whole, contiguous dims after it (`inner` elements per step of row_dim).
struct RowLayout {
  int row_dim = 0;
  int64_t inner = 1;  // elements per index of row_dim
  int64_t rows = 1;
  std::array<int64_t, kMaxRank> extent{};
};

RowLayout row_layout(const TensorView& t, const Box& box) {
  RowLayout r;
  int d = t.rank - 1;
  int64_t contiguous = 1;
  // Merge trailing dims the box covers whole while they are contiguous in memory.
  while (d > 0 && box.lo[d] == 0 && box.hi[d] == t.shape[d] && t.strides[d] == contiguous) {
    contiguous *= t.shape[d];
    --d;
  }
  r.row_dim = d;
  r.inner = contiguous;
  // Rows are memcpy'd whole: the row dimension must be contiguous with the merged ones.
  if (t.strides[d] != contiguous) throw std::logic_error("region copy: innermost dimension must be contiguous");
  for (int i = 0; i < t.rank; ++i) r.extent[i] = box.hi[i] - box.lo[i];
  for (int i = 0; i < r.row_dim; ++i) r.rows *= r.extent[i];
  return r;
}

void check_box(const TensorView& t, const Box& box, bool allow_outside) {
  for (int i = 0; i < t.rank; ++i) {
    if (box.hi[i] < box.lo[i]) throw std::logic_error("region copy: empty box");
    if (!allow_outside && (box.lo[i] < 0 || box.hi[i] > t.shape[i]))
      throw std::logic_error("region copy: box outside the tensor");
  }
}

// Bytes worth splitting over threads; below this one thread copies faster than waking others.
constexpr int64_t kParallelBytes = 1 << 20;

template <bool Gather>
void copy_rows(const TensorView& t, const Box& box, char* dense, ThreadPool& pool) {
  const RowLayout r = row_layout(t, box);
  const size_t es = t.element_size;
  const int rd = r.row_dim;
  const int64_t row_elems = r.extent[rd] * r.inner;
  const int64_t total_bytes = r.rows * row_elems * static_cast<int64_t>(es);
  // In-bounds part of the row dimension.
  const int64_t lo = std::max<int64_t>(box.lo[rd], 0), hi = std::min<int64_t>(box.hi[rd], t.shape[rd]);
  const int64_t head = std::max<int64_t>(0, std::min(lo, box.hi[rd]) - box.lo[rd]);  // zero elements before
  const int64_t body = std::max<int64_t>(0, hi - lo);
  char* base = static_cast<char*>(t.data);

  auto body_fn = [&](int64_t begin, int64_t end) {
    std::array<int64_t, kMaxRank> idx{};
    for (int64_t row = begin; row < end; ++row) {
      // Decode the row's index over dims [0, rd).
      int64_t rem = row;
      bool inside = true;
      int64_t offset = 0;
      for (int i = rd - 1; i >= 0; --i) {
        idx[i] = box.lo[i] + rem % r.extent[i];
        rem /= r.extent[i];
        if (idx[i] < 0 || idx[i] >= t.shape[i]) inside = false;
        offset += idx[i] * t.strides[i];
      }
      char* d = dense + row * row_elems * es;
      if (Gather) {
        if (!inside || body == 0) {
          std::memset(d, 0, row_elems * es);
          continue;
        }
        const size_t head_bytes = head * r.inner * es, body_bytes = body * r.inner * es;
        if (head_bytes) std::memset(d, 0, head_bytes);
        std::memcpy(d + head_bytes, base + (offset + lo * t.strides[rd]) * es, body_bytes);
        const size_t tail_bytes = row_elems * es - head_bytes - body_bytes;
        if (tail_bytes) std::memset(d + head_bytes + body_bytes, 0, tail_bytes);
      } else {
        std::memcpy(base + (offset + lo * t.strides[rd]) * es, d, row_elems * es);
      }
    }
  };
  if (total_bytes < kParallelBytes)
    body_fn(0, r.rows);
  else
    pool.parallel_for(r.rows, body_fn);
}

}  // namespace

void gather_box(const TensorView& src, const Box& box, void* dst, ThreadPool& pool) {
  check_box(src, box, true);
  copy_rows<true>(src, box, static_cast<char*>(dst), pool);
}

void scatter_box(const void* src, const TensorView& dst, const Box& box, ThreadPool& pool) {
  check_box(dst, box, false);
  copy_rows<false>(dst, box, static_cast<char*>(const_cast<void*>(src)), pool);
}

}  // namespace ooc
