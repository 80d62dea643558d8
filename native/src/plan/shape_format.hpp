// Shapes printed the way torch prints them in its error messages: "[2, 3, 8]" and "(3 x 3)".
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace ooc {

inline std::string format_shape(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

inline std::string format_size(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? " x " : "") << shape[i];
  s << ")";
  return s.str();
}

// "1.50 GiB", "512.00 MiB", "300 B"
std::string format_bytes(double bytes);

}  // namespace ooc
