// Batch norm's per-channel vectors (scale, bias, statistics and their gradients) where the
// library's host step reads and writes them. Callers may hold them in device memory: cuDNN's own
// calls take them there, and so do pyooc's device arrays. Such a vector is copied to the host
// before the run and, when it is an output, copied back once the run has succeeded, so a failed
// call leaves it as it was. Host memory of any kind is used in place.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace ooc::api {

class HostChannelVectors {
 public:
  explicit HostChannelVectors(int64_t channels) : channels_(channels) {}

  // Each returns the host address the run uses for the caller's vector (null stays null).
  const float* input(const float* caller);  // read by the run
  float* in_out(float* caller);             // read and updated (running statistics)
  float* output(float* caller);             // written by the run

  // Copies the staged outputs back to the caller's device memory; call after the run succeeded.
  void write_back();

 private:
  struct Staged {
    float* caller;
    std::vector<float> host;
    bool written;
  };
  float* stage(const float* caller, bool read, bool written);

  int64_t channels_;
  std::deque<Staged> staged_;  // a deque: the host vectors' addresses stay put as more are staged
};

}  // namespace ooc::api
