// Each operation's names for its tensors (operation_vocabulary.cpp; Plan::chunk_fields names its
// chunks' members from the same file).
#pragma once

#include "ooc/plan.hpp"

namespace ooc {

// What each slot family holds in this operation ("" where it holds nothing).
struct SlotNames {
  const char *x, *w, *y, *bias, *output;
};
SlotNames slot_names(Operation op);

// The reduction the output accumulates over, as describe() says it.
const char* reduction_name(Operation op);

}  // namespace ooc
