// The layers' use of the candidate search (candidate_search.hpp) over box tilings (box_tiling.hpp),
// for layer_planner.cpp's element-wise and per-position layers and pool_planner.cpp's pooling.
#pragma once

#include <array>
#include <vector>

#include "plan/box_tiling.hpp"
#include "plan/candidate_search.hpp"
#include "plan/planner_parts.hpp"

namespace ooc::planner_parts {

// The layers do not rank tilings by the cost model: every candidate costs the same to the search,
// so that the first one that fits wins, in the order offered: the deepest pipeline first, then
// the ladder's largest tile (tile_ladder). Nothing offered after it could win, so offering stops.
struct BoxCandidate {
  Extent5 tile{};
  int buffers = 3;
};

// The search over a layer's boxes. footprint(tile, buffers): the fit check's view of a candidate;
// expand(tile, buffers): its plan; kept_whole: what the layer never splits, for the message. When
// not even the smallest tile with one buffer fits the budget, the message names that tile's need
// even if it would make more than kMaxChunks chunks, as the layers always have: memory is then
// what the caller must give first. Otherwise the budget holds tiles too small for the chunk limit,
// and the need is the search's: the least a plan within the limits needs.
template <typename FootprintOf, typename Expand>
Plan plan_first_fitting_box(const ConvProblem& p, const PlannerConfig& config, const Extent5& extent,
                            const std::array<bool, 5>& splittable, const char* kept_whole, FootprintOf footprint,
                            Expand expand) {
  const std::vector<Extent5> ladder = tile_ladder(extent, splittable);
  return search_plan<BoxCandidate>(
      config.memory_limit,
      [&](CandidateSearch<BoxCandidate>& search) {
        for (int buffers : {3, 2, 1})
          for (const Extent5& tile : ladder) {
            if (search.found()) return;
            search.offer({tile, buffers}, footprint(tile, buffers), [] { return 0.0; });
          }
      },
      [&](const BoxCandidate& best, double) { return expand(best.tile, best.buffers); },
      [&](size_t need) {
        const Footprint smallest = footprint(ladder.back(), 1);
        const bool nothing_fits_the_budget =
            smallest.largest_chunk_tensor <= kMaxChunkElements && smallest.peak > config.memory_limit;
        throw_out_of_budget(p, config.memory_limit, nothing_fits_the_budget ? smallest.peak : need, false,
                            kept_whole);
      });
}

// A layer plan's common fields for boxes of `tile` through `buffers`-deep slots.
inline Plan box_plan_header(const ConvProblem& p, const PlannerConfig& config, const Extent5& extent,
                            const Extent5& tile, int buffers) {
  Plan plan;
  plan.problem = p;
  plan.backend = config.backend;
  plan.math = config.math;
  plan.machine = config.machine;
  plan.memory_limit = config.memory_limit;
  plan.order = LoopOrder::ns_outer;
  plan.buffers = buffers;
  set_box_tiling(plan, extent, tile);
  return plan;
}

}  // namespace ooc::planner_parts
