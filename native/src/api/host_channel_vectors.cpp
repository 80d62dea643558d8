#include "api/host_channel_vectors.hpp"

#include "api/memory_kind.hpp"

namespace ooc::api {

float* HostChannelVectors::stage(const float* caller, bool read, bool written) {
  if (caller == nullptr || !is_device_memory(caller)) return const_cast<float*>(caller);
  Staged& s = staged_.emplace_back(Staged{const_cast<float*>(caller), std::vector<float>(channels_), written});
  if (read) copy_to_host(s.host.data(), caller, s.host.size() * sizeof(float));
  return s.host.data();
}

const float* HostChannelVectors::input(const float* caller) { return stage(caller, true, false); }

float* HostChannelVectors::in_out(float* caller) { return stage(caller, true, true); }

float* HostChannelVectors::output(float* caller) { return stage(caller, false, true); }

void HostChannelVectors::write_back() {
  for (const Staged& s : staged_)
    if (s.written) copy_from_host(s.caller, s.host.data(), s.host.size() * sizeof(float));
}

}  // namespace ooc::api
