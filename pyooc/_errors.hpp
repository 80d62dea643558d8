// The one C++ -> Python exception translation, used by every `except +translate_exception`
// declaration in _ooc.pxd (as pylibcudf does). Python exception classes defined in Python
// (CudaError, CudnnError) are registered once at import.
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

inline void register_error_types(PyObject* cuda_error, PyObject* cudnn_error) {
  Py_INCREF(cuda_error);
  Py_INCREF(cudnn_error);
  cuda_error_type() = cuda_error;
  cudnn_error_type() = cudnn_error;
}

// Called by Cython inside a catch block with the GIL held: rethrows and maps the exception.
inline void translate_exception() {
  try {
    if (PyErr_Occurred()) return;  // a Python error is already set (e.g. from a callback)
    throw;
  } catch (const ooc::out_of_budget& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const ooc::cuda_error& e) {
    PyErr_SetString(cuda_error_type(), e.what());
  } catch (const ooc::cudnn_error& e) {
    PyErr_SetString(cudnn_error_type(), e.what());
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
