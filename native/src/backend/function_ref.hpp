// A non-owning reference to a callable: what Backend::issue takes for the work it wraps. Unlike
// std::function it never allocates and never copies the callable, so wrapping every operation the
// pipeline issues in it costs one indirect call. The callable must outlive the reference (a
// lambda passed straight to the call that runs it does).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace ooc {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT: implicit, so that a lambda converts at the call
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace ooc
