#include "plan/checked_size.hpp"

#include <limits>

#include "ooc/errors.hpp"
#include "plan/shape_format.hpp"

namespace ooc::checked {
namespace {

[[noreturn]] void too_large(const std::string& what) {
  throw invalid_argument(what + " is too large: pyooc indexes tensors of up to 2^60 bytes");
}

int64_t bounded(int64_t v, bool overflowed, const std::string& what) {
  if (overflowed || v > kMaxTensorBytes || v < -kMaxTensorBytes) too_large(what);
  return v;
}

}  // namespace

int64_t mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  const bool overflowed = __builtin_mul_overflow(a, b, &r);
  return bounded(r, overflowed, what);
}

int64_t add(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  const bool overflowed = __builtin_add_overflow(a, b, &r);
  return bounded(r, overflowed, what);
}

int64_t tensor_elements(const std::vector<int64_t>& shape, size_t element_size, const std::string& name) {
  const std::string what = name + " of size " + format_shape(shape);
  int64_t elements = 1;
  for (int64_t d : shape) elements = mul(elements, d, what);
  mul(elements, static_cast<int64_t>(element_size), what);  // its bytes must fit too
  return elements;
}

void kernel_int(int64_t value, const std::string& name) {
  if (value > std::numeric_limits<int32_t>::max())
    throw invalid_argument(name + " is " + std::to_string(value) + ", more than " +
                           std::to_string(std::numeric_limits<int32_t>::max()) + " (the kernels take it as an int)");
}

}  // namespace ooc::checked
