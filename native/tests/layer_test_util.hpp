// Helpers shared by the layer tests (test_layers.cpp, test_layers_pool.cpp).
#pragma once

#include <cstddef>

#include "ooc/ooc.hpp"

namespace ooc_test {

// Host backend with a memory limit in bytes.
inline ooc::Options host_options(size_t limit) {
  ooc::Options o;
  o.backend = ooc::BackendKind::host;
  o.memory_limit = limit;
  return o;
}

}  // namespace ooc_test
