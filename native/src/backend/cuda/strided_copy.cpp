#include "backend/cuda/strided_copy.hpp"

#include "backend/cuda/cuda_check.hpp"

namespace ooc {
namespace {

// The copy in its simplest equivalent form: rows of `width` bytes, `slices` of `rows` rows.
struct CopyShape {
  const char* src;
  char* dst;
  size_t width, rows, slices;
  size_t src_pitch, dst_pitch, src_slice, dst_slice;
};

CopyShape simplify(const StridedCopy& c) {
  CopyShape s{c.src, c.dst, c.width_bytes, c.height, c.depth, c.src_pitch, c.dst_pitch, c.src_slice, c.dst_slice};
  if (s.rows == 1) s.src_pitch = s.dst_pitch = s.width;  // a lone row's pitch means nothing
  if (s.slices == 1) s.src_slice = s.src_pitch * s.rows, s.dst_slice = s.dst_pitch * s.rows;
  // Slices that follow each other like rows are more rows.
  if (s.slices > 1 && s.src_slice == s.src_pitch * s.rows && s.dst_slice == s.dst_pitch * s.rows) {
    s.rows *= s.slices;
    s.slices = 1;
  }
  // Rows with no gap on either side are one longer row.
  if (s.rows > 1 && s.src_pitch == s.width && s.dst_pitch == s.width) {
    s.width *= s.rows;
    s.src_pitch = s.dst_pitch = s.width;
    s.rows = 1;
  }
  // A single row per slice: the slices are the rows.
  if (s.rows == 1 && s.slices > 1) {
    s.rows = s.slices;
    s.src_pitch = s.src_slice;
    s.dst_pitch = s.dst_slice;
    s.slices = 1;
  }
  return s;
}

void copy_2d(const char* src, size_t src_pitch, char* dst, size_t dst_pitch, size_t width, size_t rows,
             size_t max_pitch, cudaStream_t stream) {
  if (rows == 1) {
    OOC_CUDA_CHECK(cudaMemcpyAsync(dst, src, width, cudaMemcpyDefault, stream));
    return;
  }
  if (src_pitch <= max_pitch && dst_pitch <= max_pitch) {
    OOC_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, stream));
    return;
  }
  // Pitches past what the copy engine accepts (huge tensors): one copy per row, each still wide.
  for (size_t r = 0; r < rows; ++r)
    OOC_CUDA_CHECK(cudaMemcpyAsync(dst + r * dst_pitch, src + r * src_pitch, width, cudaMemcpyDefault, stream));
}

bool fits_3d(const CopyShape& s, size_t max_pitch) {
  return s.src_pitch <= max_pitch && s.dst_pitch <= max_pitch && s.src_pitch > 0 && s.dst_pitch > 0 &&
         s.src_slice % s.src_pitch == 0 && s.dst_slice % s.dst_pitch == 0 && s.src_slice / s.src_pitch >= s.rows &&
         s.dst_slice / s.dst_pitch >= s.rows;
}

}  // namespace

void issue_strided_copy(const StridedCopy& copy, size_t max_pitch, cudaStream_t stream) {
  if (copy.width_bytes == 0 || copy.height == 0 || copy.depth == 0) return;
  const CopyShape s = simplify(copy);
  if (s.slices == 1) {
    copy_2d(s.src, s.src_pitch, s.dst, s.dst_pitch, s.width, s.rows, max_pitch, stream);
    return;
  }
  if (fits_3d(s, max_pitch)) {
    cudaMemcpy3DParms parms{};
    // cudaPitchedPtr wants a non-const pointer; the source is only read.
    parms.srcPtr = cudaPitchedPtr{const_cast<char*>(s.src), s.src_pitch, s.width, s.src_slice / s.src_pitch};
    parms.dstPtr = cudaPitchedPtr{s.dst, s.dst_pitch, s.width, s.dst_slice / s.dst_pitch};
    parms.extent = cudaExtent{s.width, s.rows, s.slices};
    parms.kind = cudaMemcpyDefault;
    OOC_CUDA_CHECK(cudaMemcpy3DAsync(&parms, stream));
    return;
  }
  for (size_t z = 0; z < s.slices; ++z)
    copy_2d(s.src + z * s.src_slice, s.src_pitch, s.dst + z * s.dst_slice, s.dst_pitch, s.width, s.rows, max_pitch,
            stream);
}

}  // namespace ooc
