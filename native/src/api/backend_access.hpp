// For API files beside ooc.cpp: the process-wide backend options select, held for one call.
#pragma once

#include <functional>

#include "backend/backend.hpp"
#include "plan/planner.hpp"

namespace ooc {

// Runs fn with the backend (locked for the call) and the planner configuration for options.
void with_backend(const Options& options, const std::function<void(Backend&, const PlannerConfig&)>& fn);

}  // namespace ooc
