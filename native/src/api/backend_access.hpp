// For API files beside ooc.cpp: the process-wide backend options ask for, locked for one call,
// with the planner configuration it implies.
#pragma once

#include <functional>

#include "backend/backend.hpp"
#include "plan/planner.hpp"

namespace ooc {

void with_backend(const Options& options, const std::function<void(Backend&, const PlannerConfig&)>& fn);

}  // namespace ooc
