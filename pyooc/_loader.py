"""Loads the native extension. libooc's RPATH points at NVIDIA's cuDNN wheel beside this package;
where that fails (a system cuDNN, an unusual layout), libcudnn.so.9 is preloaded with ctypes from
CUDNN_PATH or the wheel, then the import is retried. `python -m pyooc` run inside a source checkout
imports the checkout's pyooc/, which has no compiled extension: the installed copy's is used."""

import ctypes
import importlib
import os
import sys


def _cudnn_candidates():
    env = os.environ.get("CUDNN_PATH")
    if env:
        yield os.path.join(env, "lib", "libcudnn.so.9")
        yield os.path.join(env, "lib64", "libcudnn.so.9")
    for entry in sys.path:
        yield os.path.join(entry, "nvidia", "cudnn", "lib", "libcudnn.so.9")
    yield "libcudnn.so.9"  # the system loader's search path


def _preload_cudnn():
    for candidate in _cudnn_candidates():
        if os.path.sep in candidate and not os.path.exists(candidate):
            continue
        try:
            ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            return candidate
        except OSError:
            continue
    return None


def _preload_cublas():
    # libooc also needs cuBLAS (libcublas.so.13, with libcublasLt.so.13) from NVIDIA's cu13 wheel.
    for entry in sys.path:
        lib = os.path.join(entry, "nvidia", "cu13", "lib")
        if os.path.exists(os.path.join(lib, "libcublas.so.13")):
            for name in ("libcublasLt.so.13", "libcublas.so.13"):
                ctypes.CDLL(os.path.join(lib, name), mode=ctypes.RTLD_GLOBAL)
            return lib
    return None


def _use_installed_extension():
    """Adds an installed pyooc's directory (one holding the compiled _native) to this package's
    search path; True when one was found."""
    package = sys.modules["pyooc"]
    here = [os.path.realpath(p) for p in package.__path__]
    for entry in sys.path:
        candidate = os.path.realpath(os.path.join(entry or os.getcwd(), "pyooc"))
        if candidate in here or not os.path.isdir(candidate):
            continue
        if any(name.startswith("_native.") and name.endswith(".so") for name in os.listdir(candidate)):
            package.__path__.append(candidate)
            return True
    return False


def load_native():
    try:
        return importlib.import_module("pyooc._native")
    except ModuleNotFoundError as missing:
        if missing.name != "pyooc._native" or not _use_installed_extension():
            raise
        return load_native()
    except ImportError as first:
        if "cudnn" not in str(first) and "cublas" not in str(first):
            raise
        if "cublas" in str(first):
            _preload_cublas()
        found = _preload_cudnn()
        if found is None:
            raise ImportError(
                "pyooc needs cuDNN 9 (libcudnn.so.9): install the nvidia-cudnn-cu13 wheel "
                "or set CUDNN_PATH to a cuDNN installation") from first
        return importlib.import_module("pyooc._native")
