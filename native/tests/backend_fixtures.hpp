// Where a test runs: Options for a backend and budget, whether a GPU is present, a fixture base
// that skips its tests without one, and the host backend's switch that takes caller memory as
// pinned (the direct-DMA path without a GPU).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

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

// Where the caller's tensors live, which decides the pipeline's path.
enum class CallerMemory {
  pageable,     // std::vector: gathered into staging buffers by host workers
  host_direct,  // host backend told to treat caller memory as pinned (HostDirectAccess)
  pinned,       // ooc::alloc_pinned (cuda): DMA'd straight into device slots
};

// The host backend's caller memory with HostDirectAccess(direct) in force.
inline CallerMemory host_caller_memory(bool direct) {
  return direct ? CallerMemory::host_direct : CallerMemory::pageable;
}

// Host-backend cases that each run twice, staged and by direct DMA: the parameter is (case, direct)
// and the host backend takes caller memory as pinned for the whole test when direct.
template <typename Case>
class StagedAndDirect : public ::testing::TestWithParam<std::tuple<Case, bool>> {
 protected:
  const Case& test_case() const { return std::get<0>(this->GetParam()); }
  bool direct() const { return std::get<1>(this->GetParam()); }
  CallerMemory memory() const { return host_caller_memory(direct()); }

 private:
  const HostDirectAccess access_{direct()};
};

// The parameters of a StagedAndDirect suite, and its tests' names: "<case>_staged", "<case>_direct".
template <typename Case>
auto staged_and_direct(const std::vector<Case>& cases) {
  return ::testing::Combine(::testing::ValuesIn(cases), ::testing::Bool());
}
template <typename Case>
std::string staged_or_direct_name(const ::testing::TestParamInfo<std::tuple<Case, bool>>& info) {
  return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) ? "_direct" : "_staged");
}

}  // namespace ooc_test
