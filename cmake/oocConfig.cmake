# find_package(ooc CONFIG) for C and C++ programs that link libooc from the installed pyooc wheel:
#   cmake -DCMAKE_PREFIX_PATH="$(python -c 'import pyooc; print(pyooc.get_cmake_dir())')" ...
#   target_link_libraries(app PRIVATE ooc::ooc)
# ooc::ooc brings libooc, its headers (ooc/ooc_cudnn.h, ooc/ooc_cublas.h, ooc/ooc.hpp), cuDNN's headers
# and library from NVIDIA's wheel beside pyooc (ooc::cudnn), cuBLAS' likewise (ooc::cublas, when its
# wheel is there: ooc_cublas.h includes cublas_v2.h), and the CUDA toolkit's headers (ooc_cudnn.h
# includes cuda_runtime_api.h). Installed as site-packages/pyooc/cmake/oocConfig.cmake.

get_filename_component(_ooc_package_dir "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)  # site-packages/pyooc
get_filename_component(_ooc_site_dir "${_ooc_package_dir}/.." ABSOLUTE)
# CUDNN_PATH (environment) names another cuDNN, as it does for the build.
if(DEFINED ENV{CUDNN_PATH})
  set(_ooc_cudnn_dir "$ENV{CUDNN_PATH}")
else()
  set(_ooc_cudnn_dir "${_ooc_site_dir}/nvidia/cudnn")
endif()

foreach(_ooc_file "${_ooc_package_dir}/libooc.so" "${_ooc_package_dir}/include/ooc/ooc_cudnn.h"
                  "${_ooc_cudnn_dir}/include/cudnn.h" "${_ooc_cudnn_dir}/lib/libcudnn.so.9")
  if(NOT EXISTS "${_ooc_file}")
    set(ooc_FOUND FALSE)
    set(ooc_NOT_FOUND_MESSAGE "${_ooc_file} is missing (is pyooc installed next to the nvidia-cudnn-cu13 wheel?)")
    return()
  endif()
endforeach()

include(CMakeFindDependencyMacro)
find_dependency(CUDAToolkit)

if(NOT TARGET ooc::cudnn)
  add_library(ooc::cudnn SHARED IMPORTED)
  set_target_properties(ooc::cudnn PROPERTIES
    IMPORTED_LOCATION "${_ooc_cudnn_dir}/lib/libcudnn.so.9"
    IMPORTED_SONAME "libcudnn.so.9"
    INTERFACE_INCLUDE_DIRECTORIES "${_ooc_cudnn_dir}/include")
endif()

# cuBLAS from NVIDIA's nvidia-cublas wheel (a dependency of pyooc's); CUBLAS_PATH names another, as
# it does for the build. Optional: ooc_cudnn.h alone needs none of it.
if(DEFINED ENV{CUBLAS_PATH})
  set(_ooc_cublas_dir "$ENV{CUBLAS_PATH}")
else()
  set(_ooc_cublas_dir "${_ooc_site_dir}/nvidia/cu13")
endif()
if(NOT TARGET ooc::cublas AND EXISTS "${_ooc_cublas_dir}/include/cublas_v2.h"
   AND EXISTS "${_ooc_cublas_dir}/lib/libcublas.so.13")
  add_library(ooc::cublas SHARED IMPORTED)
  set_target_properties(ooc::cublas PROPERTIES
    IMPORTED_LOCATION "${_ooc_cublas_dir}/lib/libcublas.so.13"
    IMPORTED_SONAME "libcublas.so.13"
    INTERFACE_INCLUDE_DIRECTORIES "${_ooc_cublas_dir}/include")
endif()

if(NOT TARGET ooc::ooc)
  set(_ooc_interface "ooc::cudnn;CUDA::toolkit")
  if(TARGET ooc::cublas)
    list(APPEND _ooc_interface ooc::cublas)
  endif()
  add_library(ooc::ooc SHARED IMPORTED)
  set_target_properties(ooc::ooc PROPERTIES
    IMPORTED_LOCATION "${_ooc_package_dir}/libooc.so"
    IMPORTED_SONAME "libooc.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_ooc_package_dir}/include"
    INTERFACE_LINK_LIBRARIES "${_ooc_interface}")
  unset(_ooc_interface)
endif()

unset(_ooc_file)
