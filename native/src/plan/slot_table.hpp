// A plan's device memory as a list of named pieces (Plan::slots), made once by the planner: every
// planner's search (candidate_search.hpp's search_plan) finishes its plan here, so the pipeline,
// Plan::describe and Python's Plan.slots read one table and recompute nothing.
#pragma once

#include <string>

#include "ooc/plan.hpp"

namespace ooc {

// Records one piece of the kept or scratch block (fused functions: dw per c-tile, db, carried dx
// rows, a pooled tile), `offset` bytes into it. The planner that lays a block out calls this.
void add_block_slot(Plan& plan, SlotKind kind, std::string name, size_t offset, size_t bytes);

// Puts the streamed rings in front of the recorded blocks, one entry per tensor, named from the
// operation's vocabulary (operation_vocabulary.hpp). Throws std::logic_error when the table does not
// add up to the plan's peak (a planner that counted memory it did not lay out, or the reverse).
void finish_slot_table(Plan& plan);

}  // namespace ooc
