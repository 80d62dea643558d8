// The one C++ -> Python exception translation, used by every `except +translate_exception`
// declaration in _ooc.pxd (as pylibcudf does). Python exception classes defined in Python
// (CudaError, CudnnError; pyooc/_exceptions.py) are registered once at import, and raised with the
// library's status code as well as its message.
#pragma once

#include <Python.h>

#include <new>
#include <stdexcept>

#include "ooc/errors.hpp"

namespace pyooc {

inline PyObject*& cuda_error_type() {
  static PyObject* type = PyExc_RuntimeError;
  return type;
}
inline PyObject*& cudnn_error_type() {
  static PyObject* type = PyExc_RuntimeError;
  return type;
}

inline PyObject*& cancelled_error_type() {
  static PyObject* type = PyExc_RuntimeError;
  return type;
}

inline void register_cancelled_type(PyObject* cancelled_error) {
  Py_INCREF(cancelled_error);
  cancelled_error_type() = cancelled_error;
}

inline void register_error_types(PyObject* cuda_error, PyObject* cudnn_error) {
  Py_INCREF(cuda_error);
  Py_INCREF(cudnn_error);
  cuda_error_type() = cuda_error;
  cudnn_error_type() = cudnn_error;
}

// Raises type(message, status): the CUDA / cuDNN status code travels as the exception's .status.
inline void set_error_with_status(PyObject* type, const char* message, int status) {
  PyObject* error = PyObject_CallFunction(type, "si", message, status);
  if (error == nullptr) return;  // constructing it failed: that error is the one set
  PyErr_SetObject(type, error);
  Py_DECREF(error);
}

// Called by Cython inside a catch block with the GIL held: rethrows and maps the exception.
inline void translate_exception() {
  try {
    // A Python error is already set: a callback's, or KeyboardInterrupt from the signal check of
    // a cancelled call's observer (pyooc/_observe.pxi).
    if (PyErr_Occurred()) return;
    throw;
  } catch (const ooc::cancelled& e) {  // by a CancelToken
    PyErr_SetString(cancelled_error_type(), e.what());
  } catch (const ooc::out_of_budget& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const ooc::cuda_error& e) {
    set_error_with_status(cuda_error_type(), e.what(), e.status());
  } catch (const ooc::cudnn_error& e) {
    set_error_with_status(cudnn_error_type(), e.what(), e.status());
  } catch (const ooc::not_supported& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what());
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::bad_alloc& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception in libooc");
  }
}

}  // namespace pyooc
