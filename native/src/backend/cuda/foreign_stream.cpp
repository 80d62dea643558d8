#include "backend/cuda/foreign_stream.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_scope.hpp"

namespace ooc {

void wait_for_foreign_stream(std::uintptr_t stream, int device) {
  DeviceScope scope(device);
  if (stream == 0) {
    // No stream named (the protocol's version 2, as torch exports it): the producer's work may be
    // on any stream of the device, so all of it is waited for.
    OOC_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  OOC_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
}

}  // namespace ooc
