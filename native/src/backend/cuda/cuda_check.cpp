#include "backend/cuda/cuda_check.hpp"

#include <cstring>
#include <string>

namespace ooc::cuda_detail {
namespace {

// __FILE__ may be an absolute build path; the name and line are what a reader needs.
const char* file_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  clear_last_cuda_error();
  std::string message = std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ") at " + file_name(file) + ":" + std::to_string(line);
  throw cuda_error(static_cast<int>(status), message);
}

std::string last_cudnn_error() {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));  // cuDNN 9 says *why* here, the status alone rarely does
  return detail;
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line, const std::string& reason) {
  std::string message = std::string(call) + " failed: " + cudnnGetErrorString(status);
  if (!reason.empty()) message += " (" + reason + ")";
  message += std::string(" at ") + file_name(file) + ":" + std::to_string(line);
  throw cudnn_error(static_cast<int>(status), message);
}

}  // namespace ooc::cuda_detail
