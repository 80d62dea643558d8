#include "exec/layer_pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ooc {
namespace {

using Extent = std::array<int64_t, kMaxRank>;

Box box_of(Range a, Range b, Range s0 = {0, 1}, Range s1 = {0, 1}, Range s2 = {0, 1}) {
  return Box{{a.begin, b.begin, s0.begin, s1.begin, s2.begin}, {a.end, b.end, s0.end, s1.end, s2.end}};
}

TensorView view(const void* data, const Extent& shape, size_t element_size) {
  return TensorView::contiguous(data, shape, kMaxRank, element_size);
}
// The per-chunk statistics and per-channel coefficients are float32 whatever the tensors' dtype:
// the kernels accumulate and apply them in float32.
constexpr size_t kStatisticsElementSize = sizeof(float);
const float* statistics(const void* slot) { return static_cast<const float*>(slot); }
float* statistics(void* slot) { return static_cast<float*>(slot); }

// A row-major [rows, cols] matrix whose rows lie `ld` elements apart.
TensorView matrix_view(const void* data, int64_t rows, int64_t cols, int64_t ld, size_t element_size) {
  TensorView v = view(data, {rows, cols, 1, 1, 1}, element_size);
  v.strides[0] = ld;
  return v;
}

}  // namespace

RunStats run_matmul(const Plan& plan, Backend& backend, bool trans_a, bool trans_b, const void* a, int64_t lda,
                    const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  const int64_t M = p.n, K = p.c, N = p.k;
  OperationSpec spec;
  spec.out = {c, plan.y_buffers, plan.y_slot_bytes};
  spec.beta = p.beta;
  spec.workspace_bytes = plan.workspace_bytes;
  const size_t es = dtype_size(p.dtype);
  const TensorView av = trans_a ? matrix_view(a, K, M, lda, es) : matrix_view(a, M, K, lda, es);
  const TensorView bv = trans_b ? matrix_view(b, N, K, ldb, es) : matrix_view(b, K, N, ldb, es);
  const TensorView cv = matrix_view(c, M, N, ldc, es);
  // Tiles keep the stored layout; the kernel is told which operand is transposed.
  spec.add_input({a, plan.x_buffers, plan.x_slot_bytes},
                 [=](const Chunk& ch) { return Region{av, trans_a ? box_of(ch.c, ch.n) : box_of(ch.n, ch.c)}; },
                 [](const Chunk& ch) { return ch.load_x; });
  spec.add_input({b, plan.w_buffers, plan.w_slot_bytes},
                 [=](const Chunk& ch) { return Region{bv, trans_b ? box_of(ch.k, ch.c) : box_of(ch.c, ch.k)}; },
                 [](const Chunk& ch) { return ch.load_w; });
  spec.out_region = [=](const Chunk& ch) { return Region{cv, box_of(ch.n, ch.k)}; };
  if (p.has_bias) {  // resident; added by the last chunk of each K reduction
    spec.resident = Region{view(bias, {N, 1, 1, 1, 1}, es), box_of({0, N}, {0, 1})};
    spec.resident_bytes = plan.bias_bytes;
  }
  // A half product with K split over chunks sums in the float32 scratch tile (the planner's
  // accumulator): its first chunk starts it (from the output tile when beta != 0), its last adds
  // the bias and rounds it once into the output tile.
  spec.scratch_bytes = plan.scratch_bytes;
  const bool accumulates = plan.scratch_bytes > 0;
  spec.compute = [&](const Chunk& ch, const ChunkBuffers& buf) {
    ChunkGemm shape{ch.n.size(), ch.k.size(), ch.c.size(), trans_a, trans_b, p.dtype, plan.math, p.dtype};
    const void* bias_tile = ch.last_c && p.has_bias ? advanced(buf.resident, ch.k.begin, p.dtype) : nullptr;
    if (!accumulates) {
      backend.gemm(shape, buf.in[0], buf.in[1], bias_tile, buf.out, p.alpha, buf.beta, buf.workspace,
                   plan.workspace_bytes);
      return;
    }
    shape.out_dtype = DType::float32;
    const int64_t tile = shape.m * shape.n;
    // buf.beta: the caller's on the first chunk (the output tile then holds c), 1 after it.
    if (ch.first_c && buf.beta != 0.0) backend.convert_on_device(buf.out, p.dtype, buf.scratch, DType::float32, tile);
    backend.gemm(shape, buf.in[0], buf.in[1], bias_tile, buf.scratch, p.alpha, buf.beta, buf.workspace,
                 plan.workspace_bytes);
    if (ch.last_c) backend.convert_on_device(buf.scratch, DType::float32, buf.out, p.dtype, tile);
  };
  return run_chunks(plan, backend, pool, spec);
}

RunStats run_batchnorm(const Plan& plan, Backend& backend, const BatchnormTensors& t, ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  const int64_t C = p.c;
  const Extent x_shape{p.n, C, p.in[0], p.in[1], p.in[2]};
  const bool backward = p.op == Operation::batchnorm_backward;
  const size_t es = dtype_size(p.dtype);
  const TensorView xv = view(t.x, x_shape, es), ov = view(t.out, x_shape, es);
  const TensorView dyv = backward ? view(t.dy, x_shape, es) : TensorView{};
  auto x_region = [xv](const Chunk& ch) { return Region{xv, box_of(ch.n, ch.c, ch.in[0], ch.in[1], ch.in[2])}; };
  auto shape_of = [dtype = p.dtype](const Chunk& ch) {
    return ChunkChannels{ch.n.size(), ch.c.size(), ch.in[0].size() * ch.in[1].size() * ch.in[2].size(), dtype};
  };
  auto base_spec = [&](void* out, size_t out_slot_bytes) {
    OperationSpec spec;
    spec.add_input({t.x, plan.x_buffers, plan.x_slot_bytes}, x_region);
    if (backward)
      spec.add_input({t.dy, plan.w_buffers, plan.w_slot_bytes},
                     [dyv](const Chunk& ch) { return Region{dyv, box_of(ch.n, ch.c, ch.in[0], ch.in[1], ch.in[2])}; });
    spec.out = {out, plan.y_buffers, out_slot_bytes};
    return spec;
  };
  RunStats total;
  total.h2d_busy_seconds = total.compute_busy_seconds = total.d2h_busy_seconds = -1;
  std::vector<float> coef;  // resident per-channel coefficients of the apply pass, alpha folded in
  const double alpha = p.alpha;

  if (p.op == Operation::batchnorm_forward_inference) {
    coef.resize(2 * C);
    for (int64_t c = 0; c < C; ++c) {
      const double a = t.scale[c] / std::sqrt(static_cast<double>(t.var[c]) + t.eps);
      coef[2 * c] = static_cast<float>(alpha * a);
      coef[2 * c + 1] = static_cast<float>(alpha * (t.bias[c] - t.mean[c] * a));
    }
  } else {
    // Pass 1: each chunk writes its own row of a [chunks, C, 2] table (no accumulation on the device).
    const int64_t rows = static_cast<int64_t>(plan.chunks.size());
    std::vector<float> table(static_cast<size_t>(rows * C * 2));
    std::vector<float> mean_invstd;
    OperationSpec spec = base_spec(table.data(), plan.y_slot_bytes);
    const TensorView tv = view(table.data(), {rows, C, 2, 1, 1}, kStatisticsElementSize);
    spec.out_region = [tv](const Chunk& ch) { return Region{tv, box_of(ch.k, ch.c, {0, 2})}; };
    if (backward) {
      mean_invstd.resize(2 * C);
      for (int64_t c = 0; c < C; ++c) {
        mean_invstd[2 * c] = t.saved_mean[c];
        mean_invstd[2 * c + 1] = t.saved_invstd[c];
      }
      spec.resident = Region{view(mean_invstd.data(), {C, 2, 1, 1, 1}, kStatisticsElementSize), box_of({0, C}, {0, 2})};
      spec.resident_bytes = plan.bias_bytes;
      spec.compute = [&](const Chunk& ch, const ChunkBuffers& b) {
        backend.channel_grad_sums(shape_of(ch), b.in[0], b.in[1], statistics(b.resident) + 2 * ch.c.begin,
                                  statistics(b.out));
      };
    } else {
      spec.compute = [&](const Chunk& ch, const ChunkBuffers& b) {
        backend.channel_moments(shape_of(ch), b.in[0], statistics(b.out));
      };
    }
    accumulate(total, run_chunks(plan, backend, pool, spec), RunsWere::sequential);

    // Merge the chunks' rows per channel in float64: Chan et al.'s pairwise update of (count,
    // mean, M2) for the statistics, plain sums for the gradients.
    std::vector<double> count(C, 0.0), m1(C, 0.0), m2(C, 0.0);
    for (const Chunk& ch : plan.chunks) {
      const double nb = static_cast<double>(shape_of(ch).n * shape_of(ch).space);
      for (int64_t c = ch.c.begin; c < ch.c.end; ++c) {
        const float* row = &table[static_cast<size_t>((ch.k.begin * C + c) * 2)];
        if (backward) {
          m1[c] += row[0];
          m2[c] += row[1];
          continue;
        }
        const double na = count[c], n = na + nb, delta = row[0] - m1[c];
        m1[c] += delta * nb / n;
        m2[c] += row[1] + delta * delta * na * nb / n;
        count[c] = n;
      }
    }
    const double total_count = static_cast<double>(p.n) * p.in[0] * p.in[1] * p.in[2];
    coef.resize((backward ? 3 : 2) * C);
    for (int64_t c = 0; c < C; ++c) {
      if (backward) {
        const double invstd = t.saved_invstd[c], mean = t.saved_mean[c];
        const double g = t.scale[c] * invstd, mean_dy = m1[c] / total_count, mean_dyx = m2[c] / total_count;
        t.dbias[c] = static_cast<float>(m1[c]);
        t.dscale[c] = static_cast<float>(m2[c]);
        coef[3 * c] = static_cast<float>(alpha * -g * invstd * mean_dyx);
        coef[3 * c + 1] = static_cast<float>(alpha * g);
        coef[3 * c + 2] = static_cast<float>(alpha * (-g * mean_dy + g * invstd * mean * mean_dyx));
        continue;
      }
      const double mean = m1[c], var = m2[c] / total_count, invstd = 1.0 / std::sqrt(var + t.eps);
      t.out_mean[c] = static_cast<float>(mean);
      t.out_invstd[c] = static_cast<float>(invstd);
      if (t.running_mean) {
        const double unbiased = total_count > 1 ? m2[c] / (total_count - 1) : var;
        t.running_mean[c] = static_cast<float>((1 - t.momentum) * t.running_mean[c] + t.momentum * mean);
        t.running_var[c] = static_cast<float>((1 - t.momentum) * t.running_var[c] + t.momentum * unbiased);
      }
      const double a = t.scale[c] * invstd;
      coef[2 * c] = static_cast<float>(alpha * a);
      coef[2 * c + 1] = static_cast<float>(alpha * (t.bias[c] - mean * a));
    }
  }
  if (!t.out) return total;  // statistics only

  // The apply pass: y (or dx) = per-channel affine map of x (and dy), blended into the output.
  const int per = backward ? 3 : 2;
  OperationSpec spec = base_spec(t.out, plan.y_slot_bytes);
  spec.beta = p.beta;
  spec.out_region = [ov](const Chunk& ch) { return Region{ov, box_of(ch.n, ch.c, ch.in[0], ch.in[1], ch.in[2])}; };
  spec.resident = Region{view(coef.data(), {C, per, 1, 1, 1}, kStatisticsElementSize), box_of({0, C}, {0, per})};
  spec.resident_bytes = plan.bias_bytes;
  spec.compute = [&](const Chunk& ch, const ChunkBuffers& b) {
    backend.channel_affine(shape_of(ch), b.in[0], backward ? b.in[1] : nullptr, statistics(b.resident) + per * ch.c.begin, b.beta,
                           b.out);
  };
  accumulate(total, run_chunks(plan, backend, pool, spec), RunsWere::sequential);
  return total;
}

}  // namespace ooc
