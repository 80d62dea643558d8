#include "backend/host/host_elements.hpp"

namespace ooc::host_elements {

void convert(DType from, const void* src, DType to, void* dst, int64_t count) {
  with_type(from, [&](auto in) {
    using In = decltype(in);
    with_type(to, [&](auto out) {
      using Out = decltype(out);
      const In* s = static_cast<const In*>(src);
      Out* d = static_cast<Out*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = store<Out>(load(s[i]));
    });
  });
}

}  // namespace ooc::host_elements
