// Another library's CUDA work on arrays a call reads in place (CuPy, torch CUDA: the Python API's
// device arrays). The __cuda_array_interface__ protocol hands over the producer's stream; the
// consumer must not read before the work queued there is done.
#pragma once

#include <cstdint>

namespace ooc {

// Blocks until `stream`'s queued work is done: a cudaStream_t as an integer, where 1 and 2 are CUDA's
// legacy and per-thread default streams (the protocol's values are CUDA's handles). 0 means the
// producer named no stream: then everything queued on `device` is waited for. Throws cuda_error.
void wait_for_foreign_stream(std::uintptr_t stream, int device);

}  // namespace ooc
