#include <algorithm>

#include "plan/candidate_search.hpp"
#include "plan/cost_model.hpp"
#include "plan/layer_planners.hpp"
#include "plan/planner_parts.hpp"
#include "plan/slot_table.hpp"

namespace ooc {

using namespace planner_parts;

namespace {

struct GemmCandidate {
  int64_t tm = 0, tn = 0, tk = 0;
  LoopOrder order = LoopOrder::ns_outer;  // ns_outer: M tiles outer; k_outer: N tiles outer
  int a_bufs = 3, b_bufs = 3, c_bufs = 2;
  size_t a_slot = 0, b_slot = 0, c_slot = 0, bias_bytes = 0, accumulator = 0, peak = 0;
  double h2d = 0, d2h = 0;
};

// cuBLAS' SGEMM kernels use a few MiB of workspace at most (its own default pool is 32 MiB on Hopper).
constexpr size_t kMaxGemmWorkspaceBytes = size_t{32} << 20;

size_t gemm_workspace(const PlannerConfig& cfg) {
  return std::min(cfg.workspace_bytes, kMaxGemmWorkspaceBytes) / 256 * 256;
}

// A half product whose K reduction spans chunks sums it in a float32 tile on the device (the
// chunks of one c tile run back to back, so one tile serves them all) and rounds it to half once,
// at the reduction's end: splitting K rounds no more than an unsplit call. float32 needs none.
size_t accumulator_bytes(const ConvProblem& p, int64_t tile_elements, int64_t k_tiles) {
  return p.dtype != DType::float32 && k_tiles > 1 ? slot_bytes(tile_elements, sizeof(float)) : 0;
}

// Every blocking of M, N and K, both loop orders; of equally fast ones the search keeps the first.
void offer_candidates(const ConvProblem& p, const PlannerConfig& cfg, CandidateSearch<GemmCandidate>& search) {
  const size_t workspace = gemm_workspace(cfg);
  const int64_t M = p.n, K = p.c, N = p.k;
  const double es = static_cast<double>(dtype_size(p.dtype));
  for (int64_t tm : candidate_tiles(M))
    for (int64_t tn : candidate_tiles(N))
      for (int64_t tk : candidate_tiles(K))
        for (LoopOrder order : {LoopOrder::ns_outer, LoopOrder::k_outer}) {
          const int64_t nm = ceil_div(M, tm), nn = ceil_div(N, tn), nk = ceil_div(K, tk);
          const double chunks = static_cast<double>(nm * nn * nk);
          const int64_t largest = std::max({tm * tk, tk * tn, tm * tn});
          if (!search.within_limits(largest, chunks)) continue;
          GemmCandidate c{tm, tn, tk, order};
          c.a_bufs = nm * nk == 1 ? 1 : 3;
          c.b_bufs = nn * nk == 1 ? 1 : 3;
          c.c_bufs = nm * nn == 1 ? 1 : 2;
          c.a_slot = slot_bytes(tm * tk, es);
          c.b_slot = slot_bytes(tk * tn, es);
          c.c_slot = slot_bytes(tm * tn, es);
          c.bias_bytes = bias_slot(p);
          c.accumulator = accumulator_bytes(p, tm * tn, nk);
          c.peak = c.a_bufs * c.a_slot + c.b_bufs * c.b_slot + c.c_bufs * c.c_slot + c.bias_bytes + c.accumulator +
                   workspace;
          // A tile stays on the device across consecutive chunks only when K is not split.
          const bool m_outer = order == LoopOrder::ns_outer;
          const double a_reads = m_outer ? (nk == 1 ? 1 : nn) : (nm * nk == 1 ? 1 : nn);
          const double b_reads = m_outer ? (nn * nk == 1 ? 1 : nm) : (nk == 1 ? 1 : nm);
          const double mn = static_cast<double>(M) * N * es;
          c.h2d = a_reads * M * K * es + b_reads * K * N * es + (p.beta != 0.0 ? mn : 0) + (p.has_bias ? N * es : 0);
          c.d2h = mn;
          search.offer(c, {c.peak, largest, chunks}, [&] {
            TrafficEstimate t = traffic_estimate(c.h2d, c.d2h, 2.0 * M * N * K, chunks);
            t.reduction_depth = static_cast<double>(tk);
            t.output_channels = static_cast<double>(std::min(tm, tn));
            t.copy_run_bytes = shortest_run_bytes(es, {CopyRegion{{tm, tk, 1, 1, 1}, {M, K, 1, 1, 1}},
                                                       CopyRegion{{tk, tn, 1, 1, 1}, {K, N, 1, 1, 1}},
                                                       CopyRegion{{tm, tn, 1, 1, 1}, {M, N, 1, 1, 1}}});
            t.first_load_bytes = static_cast<double>(c.a_slot + c.b_slot);
            t.last_store_bytes = static_cast<double>(c.c_slot);
            t.buffers = t.num_chunks > 1 ? std::min({c.a_bufs, c.b_bufs, c.c_bufs + 1}) : 1;
            if (t.buffers == 1 && t.num_chunks > 1) t.buffers = 2;
            return predict_seconds(t, cfg.machine);
          });
        }
}

Plan plan_of(const ConvProblem& p, const PlannerConfig& cfg, const GemmCandidate& best, double seconds) {
  const int64_t M = p.n, K = p.c, N = p.k;
  Plan plan = plan_with_totals(p, cfg, gemm_workspace(cfg), best.peak, best.h2d, best.d2h, seconds);
  plan.tiling.n = best.tm;
  plan.tiling.k = best.tn;
  plan.tiling.c = best.tk;
  plan.splits_n = ceil_div(M, best.tm);
  plan.splits_k = ceil_div(N, best.tn);
  plan.splits_c = ceil_div(K, best.tk);
  plan.order = best.order;
  set_x_w_slots(plan, best.a_bufs, best.a_slot, best.b_bufs, best.b_slot, best.b_bufs == 1);
  plan.y_buffers = plan.buffers = best.c_bufs;
  plan.bias_buffers = p.has_bias ? 1 : 0;
  plan.y_slot_bytes = best.c_slot;
  plan.bias_bytes = best.bias_bytes;
  plan.scratch_bytes = best.accumulator;
  if (best.accumulator) add_block_slot(plan, SlotKind::scratch, "float32 c", 0, best.accumulator);
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

Plan plan_gemm(const ConvProblem& p, const PlannerConfig& cfg) {
  return search_plan<GemmCandidate>(
      cfg.memory_limit, [&](auto& search) { offer_candidates(p, cfg, search); },
      [&](const GemmCandidate& best, double seconds) { return plan_of(p, cfg, best, seconds); },
      [&](size_t need) { throw_out_of_budget(p, cfg.memory_limit, need, gemm_workspace(cfg) > 0); });
}

}  // namespace

Plan plan_matmul_for(const ConvProblem& p, const PlannerConfig& cfg) {
  return with_workspace_fallback(cfg, [&](const PlannerConfig& c) { return plan_gemm(p, c); });
}

}  // namespace ooc
