"""pyooc: deep-learning layers whose tensors do not fit in GPU memory.

Tensors stay in host memory (numpy arrays, pinned or memory-mapped buffers); each operation is
split into chunks that fit a device-memory budget and streamed through the GPU (cuDNN), or through
the host backend where no GPU is present. See README.md and native/include/ooc/ooc.hpp."""

import os
from collections import namedtuple

from pyooc._exceptions import CancelledError, CudaError, CudnnError
from pyooc._loader import load_native

_native = load_native()

from pyooc._arrays import as_int  # noqa: E402
from pyooc._call_args import as_device  # noqa: E402
from pyooc._last_stats import last_stats  # noqa: E402
from pyooc.conv import conv_forward, plan_conv_forward  # noqa: E402
from pyooc.conv_backward import (  # noqa: E402
    conv_backward_bias, conv_backward_data, conv_backward_filter, plan_conv_backward_bias, plan_conv_backward_data,
    plan_conv_backward_filter)
from pyooc.batchnorm import (  # noqa: E402
    batchnorm_backward, batchnorm_forward_inference, batchnorm_forward_training, plan_batchnorm_backward,
    plan_batchnorm_forward_inference, plan_batchnorm_forward_training)
from pyooc.linalg import linear_backward, linear_forward, matmul, plan_linear_forward, plan_matmul  # noqa: E402
from pyooc.layers import (  # noqa: E402
    activation_backward, activation_forward, add_tensor, plan_activation_backward, plan_activation_forward,
    plan_add_tensor, plan_softmax_backward, plan_softmax_forward, softmax_backward, softmax_forward)
from pyooc.pooling import plan_pool_backward, plan_pool_forward, pool_backward, pool_forward  # noqa: E402
from pyooc.fused import (  # noqa: E402
    activation_conv_backward_data_filter_bias, conv_backward_data_filter_bias, conv_bias_activation_forward,
    conv_bias_activation_pooling_forward, deconv_bias_activation_forward, plan_activation_conv_backward_data_filter_bias,
    plan_conv_backward_data_filter_bias, plan_conv_bias_activation_forward, plan_conv_bias_activation_pooling_forward,
    plan_deconv_bias_activation_forward, plan_pooling_activation_conv_backward_data_filter_bias,
    pooling_activation_conv_backward_data_filter_bias)
from pyooc.memory import get_memory_limit, parse_memory_limit, set_memory_limit  # noqa: E402
from pyooc.devices import get_devices, set_devices  # noqa: E402
from pyooc.precision import get_math, set_math  # noqa: E402
from pyooc.pinned_cache import pinned_results, set_pinned_results  # noqa: E402
from pyooc.pinned import pin, pinned_empty, unpin  # noqa: E402
from pyooc.progress import CancelToken, get_progress, set_progress  # noqa: E402
from pyooc._plan_log import HostFallbackWarning, install as _install_plan_observer  # noqa: E402
from pyooc.machine import BUILTIN_MODELS, save_machine_model  # noqa: E402
from pyooc._versions import check_cudnn_runtime as _check_cudnn_runtime, info  # noqa: E402

__version__ = "0.1.0"

CudnnVersion = namedtuple("CudnnVersion", ["build", "runtime"])


def _version_tuple(v):
    # cuDNN 9 encodes its version as major * 10000 + minor * 100 + patch.
    return (v // 10000, (v % 10000) // 100, v % 100)


def cudnn_version():
    """cuDNN's version at build time and the one loaded now, as (major, minor, patch) tuples."""
    build, runtime = _native.cudnn_versions()
    return CudnnVersion(_version_tuple(build), _version_tuple(runtime))


def device_count():
    """Number of CUDA devices; 0 without a GPU or driver (never raises)."""
    return _native.device_count()


def measure_link_bandwidth(device=0, nbytes=256 << 20):
    """Pinned host <-> device copy bandwidth in bytes/s, measured now: {"h2d", "d2h", "bidir"}
    (bidir: both directions at once, total). Raises CudaError without a GPU."""
    return _native.measure_link_bandwidth(as_device(device), as_int(nbytes, "nbytes", 1, 2**64 - 1))


def roofline_seconds(bytes_in, bytes_out, bandwidth):
    """The link roofline of an out-of-core op that moves each byte once (docs/ARCHITECTURE.md,
    "Machine figures")."""
    return max(bytes_in / bandwidth["h2d"], bytes_out / bandwidth["d2h"],
               (bytes_in + bytes_out) / bandwidth["bidir"])


def get_include():
    """The directory holding libooc's headers (ooc/ooc_cudnn.h: the C API; ooc/ooc.hpp: C++), for
    building C/C++ programs against the installed package. cuDNN's headers are in the
    nvidia-cudnn-cu13 wheel (nvidia/cudnn/include), the CUDA runtime's in the CUDA toolkit."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def get_library_dir():
    """The directory holding libooc.so (link with -L<dir> -looc -Wl,-rpath,<dir>)."""
    return os.path.dirname(os.path.abspath(__file__))


def get_cmake_dir():
    """The directory holding oocConfig.cmake: put it in CMAKE_PREFIX_PATH (or set ooc_DIR) and
    find_package(ooc CONFIG) gives the imported target ooc::ooc."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "cmake")


__all__ = [
    "CudaError", "CudnnError", "conv_forward", "plan_conv_forward", "conv_backward_data", "conv_backward_filter",
    "conv_backward_bias", "plan_conv_backward_data", "plan_conv_backward_filter", "plan_conv_backward_bias",
    "activation_forward", "activation_backward", "softmax_forward", "softmax_backward", "add_tensor",
    "plan_activation_forward", "plan_activation_backward", "plan_softmax_forward", "plan_softmax_backward",
    "plan_add_tensor", "pool_forward", "plan_pool_forward", "pool_backward", "plan_pool_backward",
    "last_stats", "set_memory_limit", "set_devices", "get_devices", "set_math", "get_math", "set_pinned_results", "pinned_results",
    "conv_bias_activation_forward", "plan_conv_bias_activation_forward", "conv_backward_data_filter_bias",
    "plan_conv_backward_data_filter_bias", "activation_conv_backward_data_filter_bias",
    "plan_activation_conv_backward_data_filter_bias", "conv_bias_activation_pooling_forward",
    "plan_conv_bias_activation_pooling_forward", "deconv_bias_activation_forward",
    "plan_deconv_bias_activation_forward", "pooling_activation_conv_backward_data_filter_bias",
    "plan_pooling_activation_conv_backward_data_filter_bias",
    "matmul", "plan_matmul", "linear_forward", "plan_linear_forward", "linear_backward",
    "batchnorm_forward_training", "batchnorm_forward_inference", "batchnorm_backward",
    "plan_batchnorm_forward_training", "plan_batchnorm_forward_inference", "plan_batchnorm_backward",
    "get_memory_limit", "parse_memory_limit", "pinned_empty", "pin", "unpin", "cudnn_version", "device_count", "info",
    "measure_link_bandwidth", "roofline_seconds", "get_include", "get_library_dir", "get_cmake_dir",
    "CancelToken", "CancelledError", "set_progress", "get_progress", "__version__", "HostFallbackWarning",
    "BUILTIN_MODELS", "save_machine_model",
]

_install_plan_observer()
_check_cudnn_runtime()
