// Plans kept between calls. A plan is a pure function of its problem and planner configuration,
// and the convolution planners search thousands of tilings (10-30 ms on a server CPU, a tenth of a
// link-bound 8 GB layer). A training loop calls the same layer shapes again and again, so plans are
// kept, keyed by everything the planner reads, as cuDNN users keep their algorithm choices.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "ooc/plan.hpp"
#include "plan/planner.hpp"

namespace ooc {

// The bytes of everything a plan depends on; two keys are equal iff the planner would see the same
// inputs. Callers add the problem, the configuration and any operation-specific options.
class PlanKey {
 public:
  explicit PlanKey(const char* operation) { add(std::string(operation)); }
  PlanKey& add(const ConvProblem& p);
  PlanKey& add(const PlannerConfig& c);
  PlanKey& add(const std::string& s) {
    add(s.size());
    bytes_ += s;
    return *this;
  }
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>>
  PlanKey& add(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// The plan for `key`, made by `make` on a miss (a throwing `make` caches nothing). Process-wide,
// thread-safe, least recently used plans go first once the kept plans' chunk lists pass 64 MiB.
std::shared_ptr<const Plan> cached_plan(const PlanKey& key, const std::function<Plan()>& make);

// Tests: forget every plan; how many are kept; how many lookups were answered from the cache.
void clear_plan_cache();
size_t plan_cache_size();
size_t plan_cache_hits();

}  // namespace ooc
