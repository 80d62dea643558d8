// Where a test runs: Options for a backend and budget, whether a GPU is present, a fixture base
// that skips its tests without one, and the host backend's switch that takes caller memory as
// pinned (the direct-DMA path without a GPU).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>

#include "ooc/ooc.hpp"

namespace ooc_test {

// `backend` with a memory limit in bytes (0: the default).
inline ooc::Options options_for(ooc::BackendKind backend, size_t memory_limit = 0) {
  ooc::Options o;
  o.backend = backend;
  o.memory_limit = memory_limit;
  return o;
}

inline ooc::Options host_options(size_t memory_limit) { return options_for(ooc::BackendKind::host, memory_limit); }

inline bool have_gpu() { return ooc::device_count() > 0; }

// Base of the fixtures whose tests need a CUDA device: each skips itself without one (they still
// count as tests on a machine without a GPU). Base: ::testing::Test or a TestWithParam.
template <typename Base = ::testing::Test>
class GpuTest : public Base {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

// Makes the host backend treat caller memory as pinned for one scope: regions move by strided
// copies straight into device slots and halos are zeroed on the "device", as with pinned memory
// on the cuda backend.
class HostDirectAccess {
 public:
  explicit HostDirectAccess(bool enabled) { ooc::testing::set_host_direct_access(enabled); }
  ~HostDirectAccess() { ooc::testing::set_host_direct_access(false); }
  HostDirectAccess(const HostDirectAccess&) = delete;
  HostDirectAccess& operator=(const HostDirectAccess&) = delete;
};

}  // namespace ooc_test
