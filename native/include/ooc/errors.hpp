// Exceptions thrown by libooc. The Python bindings map each to one Python exception
// (pyooc/_errors.hpp); the C API maps them to cuDNN status codes.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

namespace ooc {

// A bad argument: message names the argument. Python: ValueError.
class invalid_argument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A valid request this build cannot serve (e.g. groups > 1 today). Python: NotImplementedError.
class not_supported : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// No plan fits the memory budget; says what the smallest plan needs. Python: MemoryError.
class out_of_budget : public std::bad_alloc {
 public:
  out_of_budget(std::string message, size_t needed_bytes)
      : message_(std::move(message)), needed_bytes_(needed_bytes) {}
  const char* what() const noexcept override { return message_.c_str(); }
  size_t needed_bytes() const noexcept { return needed_bytes_; }

 private:
  std::string message_;
  size_t needed_bytes_;
};

// The call was cancelled (CallObserver, types.hpp) and has drained and freed what it held; its
// output is partially written. Python: KeyboardInterrupt after Ctrl-C, else pyooc.CancelledError.
// C API: OOC_STATUS_CANCELLED.
class cancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failed call of a library that reports status codes: the message and that library's status.
// The base of cuda_error and cudnn_error, which differ only in whose status it is; catch those.
class status_error : public std::runtime_error {
 public:
  status_error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

// A CUDA runtime call failed (status: its cudaError_t; cuBLAS failures report theirs here too).
// Python: pyooc.CudaError.
class cuda_error : public status_error {
 public:
  using status_error::status_error;
};

// A cuDNN call failed (status: its cudnnStatus_t). Python: pyooc.CudnnError.
class cudnn_error : public status_error {
 public:
  using status_error::status_error;
};

}  // namespace ooc
