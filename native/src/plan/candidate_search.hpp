// The one candidate search every planner runs. A planner enumerates its candidates (tile sizes,
// loop orders, pipeline depths) and offers each with its footprint and a way to cost it; the
// search applies the fit check, ranks what fits by the cost, keeps the best, remembers the least
// memory a candidate over the budget needed (for the out_of_budget message) and has the winner
// expanded into its plan. What a candidate costs is the planner's and the cost model's business
// (cost_model.hpp): the search only compares the numbers, so that either can change alone (as
// Halide's autoscheduler keeps its cost model apart from its search).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "ooc/errors.hpp"
#include <vector>

#include "ooc/plan.hpp"
#include "plan/planner.hpp"
#include "plan/slot_table.hpp"

namespace ooc::planner_parts {

// The most chunks a plan may have. The chunk list is materialized (a few hundred bytes a chunk),
// and the per-dimension tilings a planner builds walk every tile of a dimension: bounding the
// chunk count bounds both, so that planning takes milliseconds and tens of MiB at most. A tiling
// of one dimension into more tiles than this can be no plan's (a plan's chunks are the product of
// its dimensions' tile counts): planners skip building it (tiles_within_limit).
constexpr size_t kMaxChunks = size_t{1} << 18;

inline bool tiles_within_limit(int64_t tiles) { return tiles <= static_cast<int64_t>(kMaxChunks); }

// The error when every candidate within the element limit makes too many chunks: the budget only
// admits tiles so small that the chunk list would pass kMaxChunks. `prefix` says which budget and
// problem ("memory_limit of 1.00 MiB is too small for ...").
[[noreturn]] inline void throw_too_many_chunks(const std::string& prefix, double chunks) {
  throw out_of_budget(prefix + ": the plan would need " + std::to_string(static_cast<long long>(std::min(chunks, 9e18))) +
                          " chunks, more than the limit of " + std::to_string(kMaxChunks) + "; raise memory_limit",
                      std::numeric_limits<size_t>::max());
}

// What the fit check reads of a candidate.
struct Footprint {
  size_t peak = 0;                   // device bytes at peak, workspace included
  int64_t largest_chunk_tensor = 0;  // elements of the largest region one chunk holds of a tensor
  double chunks = 1;                 // chunks of the plan (a double: tile counts multiply without overflow)
};

template <typename Candidate>
class CandidateSearch {
 public:
  explicit CandidateSearch(size_t budget) : budget_(budget) {}

  // A candidate whose chunk regions break cuDNN's 2^31-element limit, or whose chunk list is too
  // long, is no plan: it is dropped and its peak is no need. One over the budget only notes its
  // peak as a need. One that fits is costed (cost() runs only then) and kept when it is predicted
  // faster than the best by more than rounding: ties keep the earlier, so each planner enumerates
  // its preferred candidates first.
  template <typename Cost>
  void offer(const Candidate& candidate, const Footprint& footprint, Cost cost) {
    if (!within_limits(footprint.largest_chunk_tensor, footprint.chunks)) return;
    if (footprint.peak > budget_) {
      smallest_need_ = std::min(smallest_need_, footprint.peak);
      return;
    }
    const double seconds = cost();
    note_candidate(seconds, footprint);
    if (found_ && !(seconds < best_seconds_ * (1 - 1e-9))) return;
    best_ = candidate;
    best_seconds_ = seconds;
    found_ = true;
  }

  // Whether a candidate with these chunk regions and chunk count can be a plan at all: an
  // enumeration may skip building the candidates that offer() would drop anyway. Notes the
  // chunks of one dropped only for its chunk count (for the too-many-chunks message).
  bool within_limits(int64_t largest_chunk_tensor, double chunks) {
    const bool small_enough = largest_chunk_tensor <= kMaxChunkElements;
    if (small_enough && chunks > static_cast<double>(kMaxChunks))
      fewest_chunks_dropped_ = std::min(fewest_chunks_dropped_, chunks);
    return small_enough && chunks <= static_cast<double>(kMaxChunks);
  }

  bool found() const { return found_; }
  const Candidate& best() const { return best_; }
  double best_seconds() const { return best_seconds_; }
  // The least peak of a candidate within the limits but over the budget; max() when there was none.
  size_t smallest_need() const { return smallest_need_; }
  // The fewest chunks of a candidate dropped for making too many (within the element limit);
  // infinity when there was none.
  double fewest_chunks_dropped() const { return fewest_chunks_dropped_; }
  // The kTopCandidates fastest candidates that fitted, fastest first, and how many fitted in all.
  const std::vector<CandidateSummary>& top() const { return top_; }
  int64_t fitting() const { return fitting_; }

 private:
  static constexpr size_t kTopCandidates = 5;

  void note_candidate(double seconds, const Footprint& footprint) {
    ++fitting_;
    const CandidateSummary summary{seconds, footprint.peak, footprint.chunks};
    // Candidates that differ only where the summary cannot show it (pipeline depths of equal
    // cost) would fill the list with copies: one of each is kept.
    for (const CandidateSummary& c : top_)
      if (c.predicted_seconds == seconds && c.peak_device_bytes == footprint.peak && c.chunks == footprint.chunks)
        return;
    const auto at = std::upper_bound(top_.begin(), top_.end(), seconds,
                                     [](double s, const CandidateSummary& c) { return s < c.predicted_seconds; });
    if (static_cast<size_t>(at - top_.begin()) >= kTopCandidates) return;
    top_.insert(at, summary);
    if (top_.size() > kTopCandidates) top_.pop_back();
  }

  std::vector<CandidateSummary> top_;
  int64_t fitting_ = 0;
  size_t budget_;
  Candidate best_{};
  double best_seconds_ = 0;
  bool found_ = false;
  size_t smallest_need_ = std::numeric_limits<size_t>::max();
  double fewest_chunks_dropped_ = std::numeric_limits<double>::infinity();
};

// A planner's search: enumerate(search) offers every candidate; expand(best, its seconds) makes the
// winner's plan (finished with its slot table); when nothing fits, no_fit(smallest need) throws
// out_of_budget. A no_fit that finds no need at all (every candidate broke a limit) where some
// candidate only made too many chunks is answered with the chunk limit instead: memory_limit is
// what the caller must raise.
template <typename Candidate, typename Enumerate, typename Expand, typename NoFit>
Plan search_plan(size_t budget, Enumerate enumerate, Expand expand, NoFit no_fit) {
  CandidateSearch<Candidate> search(budget);
  enumerate(search);
  if (!search.found()) {
    try {
      no_fit(search.smallest_need());
    } catch (const out_of_budget& e) {
      if (e.needed_bytes() != std::numeric_limits<size_t>::max() ||
          search.fewest_chunks_dropped() == std::numeric_limits<double>::infinity())
        throw;
      // throw_out_of_budget's message up to what it says the smallest plan needs.
      const std::string what = e.what();
      throw_too_many_chunks(what.substr(0, what.rfind(": the smallest plan")), search.fewest_chunks_dropped());
    }
    throw std::logic_error("candidate search: nothing fits and no out_of_budget was thrown");
  }
  Plan plan = expand(search.best(), search.best_seconds());
  finish_slot_table(plan);
  plan.candidates = search.top();
  plan.candidates_fitting = search.fitting();
  return plan;
}

}  // namespace ooc::planner_parts
