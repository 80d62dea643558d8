#include "exec/fused_pipeline.hpp"

#include "exec/chunk_pipeline.hpp"
#include "exec/conv_pipeline.hpp"

namespace ooc {

RunStats run_conv_bias_activation_forward(const Plan& plan, Backend& backend, const FusedActivation& activation,
                                          const float* x, const float* w, const float* z, const float* bias, float* y,
                                          ThreadPool& pool) {
  const ConvProblem& p = plan.problem;
  // conv_forward's spec already scales by alpha (alpha1), blends beta (alpha2) into the first chunk
  // of each reduction and adds bias on the last; z only replaces y as the tile it starts from.
  OperationSpec spec = conv_forward_spec(plan, backend, x, w, bias, y);
  if (p.beta != 0.0) {
    const TensorView zv = TensorView::contiguous(
        z, {p.n, p.k, p.out[0], p.out[1], p.out[2]}, kMaxRank, dtype_size(p.dtype));
    spec.init_data = z;
    spec.init_region = [y_region = spec.out_region, zv](const Chunk& ch) {
      Region r = y_region(ch);
      r.view = zv;
      return r;
    };
  }
  if (!activation.identity) {
    // The finished tile (after the reduction's last chunk added bias) is activated in place, on
    // the device, before it is written back.
    spec.compute = [conv = spec.compute, &backend, &p, activation](const Chunk& ch, const float* xs, const float* ws,
                                                                   const float* bias_dev, float* ys, double beta,
                                                                   void* workspace) {
      conv(ch, xs, ws, bias_dev, ys, beta, workspace);
      if (!ch.last_c) return;
      ChunkConv tile;
      tile.spatial_dims = p.spatial_dims;
      tile.n = ch.n.size();
      tile.c = tile.k = ch.k.size();
      for (int d = 0; d < kMaxSpatial; ++d) tile.in[d] = tile.out[d] = ch.out[d].size();
      backend.activation_forward(tile, activation.mode, activation.coef, ys, ys);
    };
  }
  return run_chunks(plan, backend, pool, spec);
}

}  // namespace ooc
