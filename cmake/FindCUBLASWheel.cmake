# Finds cuBLAS 13 in NVIDIA's pip wheel (site-packages/nvidia/cu13: include/cublas_v2.h,
# lib/libcublas.so.13, a dependency of nvidia-cudnn-cu13), so that build and runtime use the same
# library (libooc's RPATH points at $ORIGIN/../nvidia/cu13/lib); CUBLAS_PATH overrides, the CUDA
# toolkit is the fallback. Defines CUBLAS::cublas, CUBLAS_INCLUDE_DIR, CUBLAS_LIBRARY.

set(_cublas_hints)
if(DEFINED ENV{CUBLAS_PATH})
  list(APPEND _cublas_hints "$ENV{CUBLAS_PATH}")
endif()
if(CUBLAS_PATH)
  list(APPEND _cublas_hints "${CUBLAS_PATH}")
endif()
if(Python_EXECUTABLE)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import importlib.util as u; s = u.find_spec('nvidia.cu13'); print(list(s.submodule_search_locations)[0] if s else '')"
    OUTPUT_VARIABLE _cublas_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_cublas_wheel)
    list(APPEND _cublas_hints "${_cublas_wheel}")
  endif()
endif()
if(Python_SITEARCH)
  list(APPEND _cublas_hints "${Python_SITEARCH}/nvidia/cu13")
endif()

# Hints alone first: header and library from one installation (as FindCUDNN does).
find_path(CUBLAS_INCLUDE_DIR cublas_v2.h HINTS ${_cublas_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(CUBLAS_LIBRARY NAMES libcublas.so.13 cublas NAMES_PER_DIR HINTS ${_cublas_hints}
             PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
if(NOT CUBLAS_INCLUDE_DIR OR NOT CUBLAS_LIBRARY)
  unset(CUBLAS_INCLUDE_DIR CACHE)
  unset(CUBLAS_LIBRARY CACHE)
  find_path(CUBLAS_INCLUDE_DIR cublas_v2.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(CUBLAS_LIBRARY NAMES libcublas.so.13 cublas NAMES_PER_DIR HINTS ${CUDAToolkit_LIBRARY_DIR})
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUBLASWheel REQUIRED_VARS CUBLAS_LIBRARY CUBLAS_INCLUDE_DIR)

if(CUBLASWheel_FOUND AND NOT TARGET CUBLAS::cublas)
  add_library(CUBLAS::cublas SHARED IMPORTED)
  set_target_properties(CUBLAS::cublas PROPERTIES
    IMPORTED_LOCATION "${CUBLAS_LIBRARY}"
    IMPORTED_SONAME "libcublas.so.13"
    INTERFACE_INCLUDE_DIRECTORIES "${CUBLAS_INCLUDE_DIR}")
endif()
