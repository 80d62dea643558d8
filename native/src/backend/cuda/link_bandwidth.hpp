// The host<->device link of one GPU, measured with pinned buffers (ooc::measure_link_bandwidth).
#pragma once

#include <cstddef>

#include "ooc/types.hpp"

namespace ooc {

LinkBandwidth measure_pinned_link_bandwidth(int device, size_t bytes);

}  // namespace ooc
