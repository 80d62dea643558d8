// Placeholder until the cuDNN backend lands: a clear error instead of a crash.
#include "backend/backend.hpp"

namespace ooc {
std::unique_ptr<Backend> make_cuda_backend(int) { throw not_supported("the cuda backend is not built yet"); }
}  // namespace ooc
