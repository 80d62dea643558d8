"""The C API from the installed package: a tiny C program built against it with the system compiler
(through pyooc.get_include()/get_library_dir(), and through find_package(ooc CONFIG) with
pyooc.get_cmake_dir()) runs without a GPU and gets CUDNN_STATUS_BAD_PARAM for a null handle from a
convolution and a layer entry point; through find_package, ooc/ooc_cublas.h (cuBLAS' headers from
its wheel) too, CUBLAS_STATUS_NOT_INITIALIZED for a null handle. The repository's examples/ (train_cnn, a C++
program) builds through find_package as a user builds it; without a GPU it must fail cleanly (the
GPU run is scripts/gpu-check's example step, its training on the host backend a C++ test). Skipped
only when no C (C++ for the example) compiler, no cmake for the find_package builds, or no CUDA
toolkit headers (cuda_runtime_api.h) exist."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

import pyooc

PROGRAM = r"""
#include <stdio.h>
#include <ooc/ooc_cudnn.h>

int main(void) {
  cudnnTensorDescriptor_t x;
  float one = 1.0f, zero = 0.0f;
  char why[256];
  cudnnStatus_t status;
  if (cudnnCreateTensorDescriptor(&x) != CUDNN_STATUS_SUCCESS) return 2;
  status = ooc_cudnnActivationForward(NULL, NULL, &one, x, NULL, &zero, x, NULL);
  if (status != CUDNN_STATUS_BAD_PARAM) return 3;
  status = ooc_cudnnConvolutionForward(NULL, &one, x, NULL, NULL, NULL, NULL, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                       NULL, 0, &zero, x, NULL);
  oocGetLastErrorString(why, sizeof why);
  printf("%d %s\n", (int)status, why);
  cudnnDestroyTensorDescriptor(x);
  return status == CUDNN_STATUS_BAD_PARAM ? 0 : 1;
}
"""

CUBLAS_PROGRAM = r"""
#include <stdio.h>
#include <ooc/ooc_cublas.h>

int main(void) {
  float one = 1.0f, c = 0.0f;
  char why[256];
  cublasStatus_t status = ooc_cublasSgemm(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &one, 1, &one, 1, &one, &c, 1);
  oocGetLastErrorString(why, sizeof why);
  printf("%d %s\n", (int)status, why);
  return status == CUBLAS_STATUS_NOT_INITIALIZED ? 0 : 1;
}
"""

CMAKELISTS = """
cmake_minimum_required(VERSION 3.26)
project(capi_probe C)
find_package(ooc CONFIG REQUIRED)
add_executable(probe probe.c)
target_link_libraries(probe PRIVATE ooc::ooc)
add_executable(cublas_probe cublas_probe.c)
target_link_libraries(cublas_probe PRIVATE ooc::ooc)
"""


def _compiler(env_var, candidates):
    for candidate in (os.environ.get(env_var),) + candidates:
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _cuda_include():
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT")] + ["/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(nvcc)))
    for root in filter(None, roots):
        if os.path.exists(os.path.join(root, "include", "cuda_runtime_api.h")):
            return os.path.join(root, "include")
    return None


def _cudnn_dir():
    spec = importlib.util.find_spec("nvidia.cudnn")
    return os.environ.get("CUDNN_PATH") or (list(spec.submodule_search_locations)[0] if spec else None)


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
CC = _compiler("CC", ("cc", "gcc", "clang"))
CXX = _compiler("CXX", ("c++", "g++", "clang++"))
CUDA_INCLUDE = _cuda_include()
needs_toolchain = pytest.mark.skipif(CC is None or CUDA_INCLUDE is None,
                                     reason="needs a C compiler and the CUDA toolkit's headers")


def _run_probe(exe, want_status=2000):  # CUDNN_STATUS_BAD_PARAM
    result = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    status, _, why = result.stdout.strip().partition(" ")
    assert int(status) == want_status
    assert "handle" in why


def test_paths_exist():
    assert os.path.exists(os.path.join(pyooc.get_include(), "ooc", "ooc_cudnn.h"))
    assert os.path.exists(os.path.join(pyooc.get_include(), "ooc", "ooc_cublas.h"))
    assert os.path.exists(os.path.join(pyooc.get_include(), "ooc", "ooc.hpp"))
    assert os.path.exists(os.path.join(pyooc.get_library_dir(), "libooc.so"))
    assert os.path.exists(os.path.join(pyooc.get_cmake_dir(), "oocConfig.cmake"))


@needs_toolchain
def test_c_program_with_get_include_and_get_library_dir(tmp_path):
    (tmp_path / "probe.c").write_text(PROGRAM)
    cudnn = _cudnn_dir()
    lib = pyooc.get_library_dir()
    cmd = [CC, "-std=c99", "-Wall", "-Werror", str(tmp_path / "probe.c"), "-o", str(tmp_path / "probe"),
           "-I", pyooc.get_include(), "-I", os.path.join(cudnn, "include"), "-I", CUDA_INCLUDE,
           "-L", lib, "-looc", os.path.join(cudnn, "lib", "libcudnn.so.9"),
           f"-Wl,-rpath,{lib}", f"-Wl,-rpath,{os.path.join(cudnn, 'lib')}"]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, " ".join(cmd) + "\n" + build.stderr
    _run_probe(str(tmp_path / "probe"))


def _cmake():
    found = shutil.which("cmake")
    if found:
        return [found]
    if importlib.util.find_spec("cmake"):
        return [sys.executable, "-m", "cmake"]
    return None


def _configure_and_build(source, build, env):
    cmake = _cmake()
    if cmake is None:
        pytest.skip("needs cmake")
    configure = subprocess.run(
        cmake + ["-S", str(source), "-B", str(build), f"-DCMAKE_PREFIX_PATH={pyooc.get_cmake_dir()}"],
        capture_output=True, text=True, env=env)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    result = subprocess.run(cmake + ["--build", str(build)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_toolchain
def test_c_program_with_find_package(tmp_path):
    (tmp_path / "probe.c").write_text(PROGRAM)
    (tmp_path / "cublas_probe.c").write_text(CUBLAS_PROGRAM)
    (tmp_path / "CMakeLists.txt").write_text(CMAKELISTS)
    env = dict(os.environ, CC=CC, CUDAToolkit_ROOT=os.path.dirname(CUDA_INCLUDE))
    _configure_and_build(tmp_path, tmp_path / "build", env)
    _run_probe(str(tmp_path / "build" / "probe"))
    _run_probe(str(tmp_path / "build" / "cublas_probe"), want_status=1)  # CUBLAS_STATUS_NOT_INITIALIZED


@needs_toolchain
@pytest.mark.skipif(CXX is None, reason="needs a C++ compiler")
def test_example_builds_against_the_installed_package(tmp_path):
    env = dict(os.environ, CXX=CXX, CUDAToolkit_ROOT=os.path.dirname(CUDA_INCLUDE))
    _configure_and_build(EXAMPLES, tmp_path / "build", env)
    exe = str(tmp_path / "build" / "train_cnn")
    usage = subprocess.run([exe, "1"], capture_output=True, text=True, timeout=60)  # below average_over
    assert usage.returncode == 2 and "usage" in usage.stderr, usage.stdout + usage.stderr
    if pyooc.device_count() == 0:
        # The CHECK path: the first call that needs a GPU fails, named, and the program says so.
        run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        assert run.returncode == 1, run.stdout + run.stderr
        assert "train_cnn: cudnnCreate" in run.stderr, run.stderr
