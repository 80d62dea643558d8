#include "api/float32_output.hpp"

#include "backend/host/host_elements.hpp"

namespace ooc {

void convert_elements(DType from, const void* src, DType to, void* dst, int64_t count) {
  host_elements::convert(from, src, to, dst, count);
}

}  // namespace ooc
