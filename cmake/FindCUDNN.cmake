# Finds cuDNN 9: headers + libcudnn.so.9.
# Looks in CUDNN_PATH (env or cache) first, then in NVIDIA's pip wheel (site-packages/nvidia/cudnn),
# then in the CUDA toolkit and system paths. The wheel ships only the versioned libcudnn.so.9, so the
# library is accepted by that name too (as NVIDIA/cudnn-frontend's cmake/cuDNN.cmake does).
# Defines CUDNN::cudnn, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_LIBRARY_DIR, CUDNN_VERSION.

set(_cudnn_hints)
if(DEFINED ENV{CUDNN_PATH})
  list(APPEND _cudnn_hints "$ENV{CUDNN_PATH}")
endif()
if(CUDNN_PATH)
  list(APPEND _cudnn_hints "${CUDNN_PATH}")
endif()
# NVIDIA's wheel as the interpreter sees it: also right inside pip's isolated build environment,
# whose packages are on sys.path but not in Python_SITEARCH.
if(Python_EXECUTABLE)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import importlib.util as u; s = u.find_spec('nvidia.cudnn'); print(list(s.submodule_search_locations)[0] if s else '')"
    OUTPUT_VARIABLE _cudnn_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_cudnn_wheel)
    list(APPEND _cudnn_hints "${_cudnn_wheel}")
  endif()
endif()
if(Python_SITEARCH)
  list(APPEND _cudnn_hints "${Python_SITEARCH}/nvidia/cudnn")
endif()
if(Python_SITELIB)
  list(APPEND _cudnn_hints "${Python_SITELIB}/nvidia/cudnn")
endif()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _cudnn_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()

# Hints first and alone, so a system cuDNN never shadows the wheel's (or CUDNN_PATH's): headers
# and library must come from the same installation. NAMES_PER_DIR: the wheel has only libcudnn.so.9.
find_path(CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${_cudnn_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(CUDNN_LIBRARY NAMES libcudnn.so.9 cudnn NAMES_PER_DIR HINTS ${_cudnn_hints} PATH_SUFFIXES lib lib64
             NO_DEFAULT_PATH)
find_path(CUDNN_INCLUDE_DIR cudnn_version.h PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES libcudnn.so.9 cudnn NAMES_PER_DIR PATH_SUFFIXES lib lib64)

if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(READ "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_version_h)
  string(REGEX MATCH "define CUDNN_MAJOR ([0-9]+)" _ "${_cudnn_version_h}")
  set(CUDNN_VERSION_MAJOR ${CMAKE_MATCH_1})
  string(REGEX MATCH "define CUDNN_MINOR ([0-9]+)" _ "${_cudnn_version_h}")
  set(CUDNN_VERSION_MINOR ${CMAKE_MATCH_1})
  string(REGEX MATCH "define CUDNN_PATCHLEVEL ([0-9]+)" _ "${_cudnn_version_h}")
  set(CUDNN_VERSION_PATCH ${CMAKE_MATCH_1})
  set(CUDNN_VERSION "${CUDNN_VERSION_MAJOR}.${CUDNN_VERSION_MINOR}.${CUDNN_VERSION_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION)

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  if(NOT CUDNN_VERSION_MAJOR EQUAL 9)
    message(FATAL_ERROR "pyooc needs cuDNN 9, found ${CUDNN_VERSION} in ${CUDNN_INCLUDE_DIR}")
  endif()
  get_filename_component(CUDNN_LIBRARY_DIR "${CUDNN_LIBRARY}" DIRECTORY)
  add_library(CUDNN::cudnn SHARED IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    IMPORTED_SONAME "libcudnn.so.9"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
