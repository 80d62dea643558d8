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

std::array<int, kMaxRank> dense_order(const TensorView& view) {
  const auto order = layout_order(view.channels_last ? Layout::channels_last : Layout::channels_first, view.rank);
  std::array<int, kMaxRank> first{};
  std::copy(order.begin(), order.begin() + kMaxRank, first.begin());
  return first;
}

TensorView TensorView::dense(const void* data, const std::array<int64_t, kMaxRank>& shape, int rank,
                             size_t element_size, bool channels_last) {
  TensorView v = contiguous(data, shape, rank, element_size);
  v.channels_last = channels_last;
  const std::array<int, kMaxRank> order = dense_order(v);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    v.strides[order[i]] = stride;
    stride *= shape[order[i]];
  }
  return v;
}

TensorView TensorView::window(const std::array<int64_t, kMaxRank>& lo, const std::array<int64_t, kMaxRank>& hi) const {
  TensorView v = *this;
  int64_t offset = 0;
  for (int i = 0; i < rank; ++i) {
    if (lo[i] < 0 || hi[i] < lo[i] || hi[i] > shape[i]) throw std::logic_error("region copy: window outside the view");
    offset += lo[i] * strides[i];
    v.shape[i] = hi[i] - lo[i];
  }
  v.data = static_cast<char*>(data) + offset * static_cast<int64_t>(element_size);
  v.border = PaddingMode::zeros;  // outside a window means outside the tensor
  return v;
}

int64_t Box::elements(int rank) const {
  int64_t e = 1;
  for (int i = 0; i < rank; ++i) e *= hi[i] - lo[i];
  return e;
}

Box Box::clipped_to(const std::array<int64_t, kMaxRank>& shape, int rank) const {
  Box b = *this;
  for (int i = 0; i < rank; ++i) {
    b.lo[i] = std::min(std::max<int64_t>(lo[i], 0), shape[i]);
    b.hi[i] = std::max(std::min(hi[i], shape[i]), b.lo[i]);
  }
  return b;
}

Box Box::shifted(const std::array<int64_t, kMaxRank>& origin) const {
  Box b;
  for (int i = 0; i < kMaxRank; ++i) {
    b.lo[i] = lo[i] - origin[i];
    b.hi[i] = hi[i] - origin[i];
  }
  return b;
}

int64_t border_source(int64_t i, int64_t size, PaddingMode mode) {
  if (i >= 0 && i < size) return i;
  int64_t source = -1;
  switch (mode) {
    case PaddingMode::zeros: return -1;
    case PaddingMode::reflect: source = i < 0 ? -i : 2 * (size - 1) - i; break;
    case PaddingMode::replicate: source = i < 0 ? 0 : size - 1; break;
    case PaddingMode::circular: source = i < 0 ? i + size : i - size; break;
  }
  if (source < 0 || source >= size) throw std::logic_error("region copy: border reaches past one period of the tensor");
  return source;
}

namespace {

// A view and a box of it, permuted into the order of the view's dense buffers (dense_order): the
// copies below then run on channels-first terms alone.
struct DenseOrder {
  TensorView view;
  Box box;
};

DenseOrder in_dense_order(const TensorView& t, const Box& box) {
  if (!t.channels_last) return {t, box};
  const std::array<int, kMaxRank> order = dense_order(t);
  DenseOrder r{t, box};
  r.view.channels_last = false;
  for (int i = 0; i < t.rank; ++i) {
    r.view.shape[i] = t.shape[order[i]];
    r.view.strides[i] = t.strides[order[i]];
    r.box.lo[i] = box.lo[order[i]];
    r.box.hi[i] = box.hi[order[i]];
  }
  return r;
}

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
  if (t.strides[t.rank - 1] != 1) throw std::logic_error("region copy: innermost dimension must be contiguous");
  // Merge the row dim into the one before it while the box covers it whole and that one steps
  // exactly over it in memory.
  int d = t.rank - 1;
  int64_t inner = 1;
  while (d > 0 && box.lo[d] == 0 && box.hi[d] == t.shape[d] && t.strides[d - 1] == t.strides[d] * t.shape[d]) {
    inner *= t.shape[d];
    --d;
  }
  r.row_dim = d;
  r.inner = inner;
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
// Rows longer than this are cut into pieces of about this size for the workers.
constexpr int64_t kPieceBytes = 1 << 20;

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

  // Work items are pieces of rows: a box of a few long rows (whole samples, say) must still spread
  // over every worker, since one thread's memcpy reaches a fraction of the memory bandwidth.
  const int64_t row_bytes = row_elems * static_cast<int64_t>(es);
  const int64_t pieces = total_bytes < kParallelBytes ? 1 : std::max<int64_t>(1, row_bytes / kPieceBytes);
  const int64_t piece_elems = (row_elems + pieces - 1) / pieces;
  const int64_t body_begin = head * r.inner, body_end = (head + body) * r.inner;  // in the dense row

  auto copy_pieces = [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / pieces;
      const int64_t a = (item % pieces) * piece_elems, b = std::min(row_elems, a + piece_elems);
      if (a >= b) continue;
      // Decode the row's index over dims [0, rd); a border mode reads a row outside the tensor
      // from the row it maps to.
      int64_t rem = row;
      bool inside = true;
      int64_t offset = 0;
      for (int i = rd - 1; i >= 0; --i) {
        const int64_t idx = border_source(box.lo[i] + rem % r.extent[i], t.shape[i], t.border);
        rem /= r.extent[i];
        if (idx < 0) inside = false;
        offset += idx * t.strides[i];
      }
      char* d = dense + row * row_bytes;
      // Dense element e (body_begin <= e < body_end) is tensor element `row_start` + (e - body_begin).
      char* row_start = base + (offset + lo * t.strides[rd]) * static_cast<int64_t>(es);
      if (Gather && t.border != PaddingMode::zeros) {
        // Each row-dim index outside the tensor copies its `inner` elements from the index it maps
        // to (one memcpy per halo index: reflect reverses their order); the body as below.
        for (int64_t j = a / r.inner; j * r.inner < b; ++j) {
          const int64_t ja = std::max(a, j * r.inner), jb = std::min(b, (j + 1) * r.inner);
          const int64_t idx = box.lo[rd] + j;
          const int64_t src = border_source(idx, t.shape[rd], t.border);
          if (idx >= 0 && idx < t.shape[rd]) {  // the whole in-tensor run at once
            const int64_t run_end = std::min(b, body_end);
            std::memcpy(d + ja * es, row_start + (ja - body_begin) * es, (run_end - ja) * es);
            j = (run_end - 1) / r.inner;
            continue;
          }
          const char* from = base + (offset + src * t.strides[rd]) * static_cast<int64_t>(es);
          std::memcpy(d + ja * es, from + (ja - j * r.inner) * es, (jb - ja) * es);
        }
        continue;
      }
      if (Gather) {
        if (!inside || body == 0) {
          std::memset(d + a * es, 0, (b - a) * es);
          continue;
        }
        const int64_t copy_a = std::max(a, body_begin), copy_b = std::min(b, body_end);
        if (copy_a > a) std::memset(d + a * es, 0, (std::min(b, body_begin) - a) * es);
        if (copy_b > copy_a)
          std::memcpy(d + copy_a * es, row_start + (copy_a - body_begin) * es, (copy_b - copy_a) * es);
        if (b > body_end) {
          const int64_t zero_a = std::max(a, body_end);
          std::memset(d + zero_a * es, 0, (b - zero_a) * es);
        }
      } else {
        std::memcpy(row_start + a * es, d + a * es, (b - a) * es);  // inside the tensor: no head
      }
    }
  };
  if (total_bytes < kParallelBytes)
    copy_pieces(0, r.rows * pieces);
  else
    pool.parallel_for(r.rows * pieces, copy_pieces);
}

}  // namespace

BoxCopies strided_box_copies(const TensorView& view, const Box& logical_box, char* dense, bool to_dense) {
  const DenseOrder ordered = in_dense_order(view, logical_box);
  const TensorView& t = ordered.view;
  const Box& box = ordered.box;
  check_box(t, box, true);
  if (t.border != PaddingMode::zeros && !(box.clipped_to(t.shape, t.rank) == box))
    throw std::logic_error("region copy: a border mode's halo is computed by gather_box, not by DMA");
  BoxCopies result;
  const int rank = t.rank;
  const int64_t es = static_cast<int64_t>(t.element_size);
  // Clip to the tensor; the dense buffer keeps the whole box's shape.
  Box clipped = box;
  for (int i = 0; i < rank; ++i) {
    clipped.lo[i] = std::max<int64_t>(box.lo[i], 0);
    clipped.hi[i] = std::min<int64_t>(box.hi[i], t.shape[i]);
    if (clipped.lo[i] != box.lo[i] || clipped.hi[i] != box.hi[i]) result.covers_all = false;
    if (clipped.hi[i] <= clipped.lo[i]) return result;  // nothing inside
  }
  std::array<int64_t, kMaxRank> dense_strides{};
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    dense_strides[i] = stride;
    stride *= box.hi[i] - box.lo[i];
  }
  // Rows: the row dim absorbs the dims after it that the box covers whole, as long as the tensor
  // is contiguous over them (the dense buffer always is).
  if (t.strides[rank - 1] != 1) throw std::logic_error("region copy: innermost dimension must be contiguous");
  int rd = rank - 1;
  int64_t inner = 1;
  while (rd > 0 && box.lo[rd] == 0 && box.hi[rd] == t.shape[rd] && t.strides[rd - 1] == t.strides[rd] * t.shape[rd]) {
    inner *= t.shape[rd];
    --rd;
  }
  const size_t width = static_cast<size_t>((clipped.hi[rd] - clipped.lo[rd]) * inner * es);
  // Up to two dims above the row become the copy's height and depth; the rest are looped.
  const int hd = rd - 1, dd = rd - 2;
  const int looped = std::max(0, rd - 2);
  int64_t loops = 1;
  for (int i = 0; i < looped; ++i) loops *= clipped.hi[i] - clipped.lo[i];
  for (int64_t l = 0; l < loops; ++l) {
    int64_t rem = l, src_off = 0, dst_off = 0;
    for (int i = looped - 1; i >= 0; --i) {
      const int64_t ext = clipped.hi[i] - clipped.lo[i];
      const int64_t idx = clipped.lo[i] + rem % ext;
      rem /= ext;
      src_off += idx * t.strides[i];
      dst_off += (idx - box.lo[i]) * dense_strides[i];
    }
    for (int i = looped; i <= rd; ++i) {
      src_off += clipped.lo[i] * t.strides[i];
      dst_off += (clipped.lo[i] - box.lo[i]) * dense_strides[i];
    }
    StridedCopy c;
    const char* tensor_ptr = static_cast<const char*>(t.data) + src_off * es;
    char* dense_ptr = dense + dst_off * es;
    c.width_bytes = width;
    c.height = hd >= 0 ? static_cast<size_t>(clipped.hi[hd] - clipped.lo[hd]) : 1;
    c.depth = dd >= 0 ? static_cast<size_t>(clipped.hi[dd] - clipped.lo[dd]) : 1;
    const size_t t_pitch = hd >= 0 ? static_cast<size_t>(t.strides[hd] * es) : width;
    const size_t t_slice = dd >= 0 ? static_cast<size_t>(t.strides[dd] * es) : t_pitch * c.height;
    const size_t d_pitch = hd >= 0 ? static_cast<size_t>(dense_strides[hd] * es) : width;
    const size_t d_slice = dd >= 0 ? static_cast<size_t>(dense_strides[dd] * es) : d_pitch * c.height;
    if (to_dense) {
      c.src = tensor_ptr;
      c.dst = dense_ptr;
      c.src_pitch = t_pitch, c.src_slice = t_slice, c.dst_pitch = d_pitch, c.dst_slice = d_slice;
    } else {
      c.src = dense_ptr;
      c.dst = const_cast<char*>(tensor_ptr);
      c.src_pitch = d_pitch, c.src_slice = d_slice, c.dst_pitch = t_pitch, c.dst_slice = t_slice;
    }
    result.copies.push_back(c);
  }
  return result;
}

void gather_box(const TensorView& src, const Box& box, void* dst, ThreadPool& pool) {
  const DenseOrder o = in_dense_order(src, box);
  check_box(o.view, o.box, true);
  copy_rows<true>(o.view, o.box, static_cast<char*>(dst), pool);
}

void scatter_box(const void* src, const TensorView& dst, const Box& box, ThreadPool& pool) {
  const DenseOrder o = in_dense_order(dst, box);
  check_box(o.view, o.box, false);
  copy_rows<false>(o.view, o.box, static_cast<char*>(const_cast<void*>(src)), pool);
}

}  // namespace ooc
