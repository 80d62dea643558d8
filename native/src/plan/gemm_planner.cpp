#include <limits>

#include "plan/cost_model.hpp"
#include "plan/layer_planners.hpp"
#include "plan/planner_parts.hpp"

namespace ooc {

using namespace planner_parts;

namespace {

struct GemmCandidate {
  int64_t tm = 0, tn = 0, tk = 0;
  LoopOrder order = LoopOrder::ns_outer;  // ns_outer: M tiles outer; k_outer: N tiles outer
  int a_bufs = 3, b_bufs = 3, c_bufs = 2;
  size_t a_slot = 0, b_slot = 0, c_slot = 0, bias_slot = 0, peak = 0;
  double h2d = 0, d2h = 0, seconds = 0;
};

}  // namespace

namespace {

// cuBLAS' SGEMM kernels use a few MiB of workspace at most (its own default pool is 32 MiB on Hopper).
constexpr size_t kMaxGemmWorkspaceBytes = size_t{32} << 20;

Plan plan_gemm(const ConvProblem& p, const PlannerConfig& cfg) {
  const size_t workspace = std::min(cfg.workspace_bytes, kMaxGemmWorkspaceBytes) / 256 * 256;
  const int64_t M = p.n, K = p.c, N = p.k;
  const double es = static_cast<double>(dtype_size(p.dtype));
  const size_t budget = cfg.memory_limit;
  GemmCandidate best;
  best.seconds = std::numeric_limits<double>::infinity();
  size_t smallest_peak = std::numeric_limits<size_t>::max();
  for (int64_t tm : candidate_tiles(M))
    for (int64_t tn : candidate_tiles(N))
      for (int64_t tk : candidate_tiles(K))
        for (LoopOrder order : {LoopOrder::ns_outer, LoopOrder::k_outer}) {
          const int64_t nm = ceil_div(M, tm), nn = ceil_div(N, tn), nk = ceil_div(K, tk);
          if (static_cast<size_t>(nm * nn * nk) > kMaxChunks) continue;
          if (tm * tk > kMaxChunkElements || tk * tn > kMaxChunkElements || tm * tn > kMaxChunkElements) continue;
          GemmCandidate c{tm, tn, tk, order};
          c.a_bufs = nm * nk == 1 ? 1 : 3;
          c.b_bufs = nn * nk == 1 ? 1 : 3;
          c.c_bufs = nm * nn == 1 ? 1 : 2;
          c.a_slot = slot_bytes(tm * tk, es);
          c.b_slot = slot_bytes(tk * tn, es);
          c.c_slot = slot_bytes(tm * tn, es);
          c.bias_slot = p.has_bias ? slot_bytes(N, es) : 0;
          c.peak = c.a_bufs * c.a_slot + c.b_bufs * c.b_slot + c.c_bufs * c.c_slot + c.bias_slot + workspace;
          if (c.peak > budget) {
            smallest_peak = std::min(smallest_peak, c.peak);
            continue;
          }
          // A tile stays on the device across consecutive chunks only when K is not split.
          const bool m_outer = order == LoopOrder::ns_outer;
          const double a_reads = m_outer ? (nk == 1 ? 1 : nn) : (nm * nk == 1 ? 1 : nn);
          const double b_reads = m_outer ? (nn * nk == 1 ? 1 : nm) : (nk == 1 ? 1 : nm);
          const double mn = static_cast<double>(M) * N * es;
          c.h2d = a_reads * M * K * es + b_reads * K * N * es + (p.beta != 0.0 ? mn : 0) + (p.has_bias ? N * es : 0);
          c.d2h = mn;
          TrafficEstimate t;
          t.bytes_h2d = c.h2d;
          t.bytes_d2h = c.d2h;
          t.flops = 2.0 * M * N * K;
          t.num_chunks = static_cast<double>(nm * nn * nk);
          t.reduction_depth = static_cast<double>(tk);
          t.output_channels = static_cast<double>(std::min(tm, tn));
          t.copy_run_bytes = es * std::min({contiguous_run({tm, tk, 1, 1, 1}, {M, K, 1, 1, 1}),
                                            contiguous_run({tk, tn, 1, 1, 1}, {K, N, 1, 1, 1}),
                                            contiguous_run({tm, tn, 1, 1, 1}, {M, N, 1, 1, 1})});
          t.first_load_bytes = static_cast<double>(c.a_slot + c.b_slot);
          t.last_store_bytes = static_cast<double>(c.c_slot);
          t.buffers = t.num_chunks > 1 ? std::min({c.a_bufs, c.b_bufs, c.c_bufs + 1}) : 1;
          if (t.buffers == 1 && t.num_chunks > 1) t.buffers = 2;
          c.seconds = predict_seconds(t, cfg.machine);
          if (c.seconds < best.seconds) best = c;
        }
  if (best.tm == 0) throw_out_of_budget(p, budget, smallest_peak, workspace > 0);

  Plan plan;
  plan.problem = p;
  plan.backend = cfg.backend;
  plan.machine = cfg.machine;
  plan.memory_limit = budget;
  plan.tiling.n = best.tm;
  plan.tiling.k = best.tn;
  plan.tiling.c = best.tk;
  plan.splits_n = ceil_div(M, best.tm);
  plan.splits_k = ceil_div(N, best.tn);
  plan.splits_c = ceil_div(K, best.tk);
  plan.order = best.order;
  plan.x_buffers = best.a_bufs;
  plan.w_buffers = best.b_bufs;
  plan.y_buffers = plan.buffers = best.c_bufs;
  plan.w_resident = best.b_bufs == 1;
  plan.bias_buffers = p.has_bias ? 1 : 0;
  plan.x_slot_bytes = best.a_slot;
  plan.w_slot_bytes = best.b_slot;
  plan.y_slot_bytes = best.c_slot;
  plan.bias_bytes = best.bias_slot;
  plan.workspace_bytes = workspace;
  plan.peak_device_bytes = best.peak;
  plan.bytes_h2d = static_cast<size_t>(best.h2d);
  plan.bytes_d2h = static_cast<size_t>(best.d2h);
  plan.predicted_seconds = best.seconds;
  const bool m_outer = best.order == LoopOrder::ns_outer;
  const int64_t outer = m_outer ? plan.splits_n : plan.splits_k, inner = m_outer ? plan.splits_k : plan.splits_n;
  Range prev_a{-1, -1}, prev_a_c{-1, -1}, prev_b{-1, -1}, prev_b_c{-1, -1};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t kk = 0; kk < plan.splits_c; ++kk) {
        const int64_t mi = m_outer ? o : i, ni = m_outer ? i : o;
        Chunk ch;
        ch.n = {mi * best.tm, std::min(M, (mi + 1) * best.tm)};
        ch.k = {ni * best.tn, std::min(N, (ni + 1) * best.tn)};
        ch.c = {kk * best.tk, std::min(K, (kk + 1) * best.tk)};
        ch.load_x = ch.n != prev_a || ch.c != prev_a_c;
        ch.load_w = ch.k != prev_b || ch.c != prev_b_c;
        prev_a = ch.n;
        prev_a_c = prev_b_c = ch.c;
        prev_b = ch.k;
        ch.first_c = kk == 0;
        ch.last_c = kk == plan.splits_c - 1;
        plan.chunks.push_back(ch);
      }
  return plan;
}

}  // namespace

Plan plan_matmul_for(const ConvProblem& p, const PlannerConfig& cfg) {
  return with_workspace_fallback(cfg, [&](const PlannerConfig& c) { return plan_gemm(p, c); });
}

}  // namespace ooc
