"""What `pyooc.info()` and `pyooc info` report: versions in the form people write them, devices,
the effective default budget, and the check that the cuDNN loaded is not older than the one pyooc
was built against (pip installing torch next to pyooc can replace it)."""

import warnings

from pyooc._loader import load_native

_native = load_native()


def cudnn_version_tuple(v):
    # cuDNN 9 encodes its version as major * 10000 + minor * 100 + patch.
    return (v // 10000, (v % 10000) // 100, v % 100)


def cuda_version_string(v):
    """CUDA's runtime version (1000 * major + 10 * minor, 13000 for 13.0) as "13.0"; "none" for 0
    (no driver)."""
    if v <= 0:
        return "none (no CUDA driver)"
    return f"{v // 1000}.{(v % 1000) // 10}"


def cudnn_older_than_built(versions=None):
    """The warning's text when the loaded cuDNN is older than the one built against, else None
    (versions: (build, runtime) as cuDNN encodes them; default: pyooc's own)."""
    build, runtime = versions or _native.cudnn_versions()
    if runtime >= build or runtime == 0:
        return None
    b, r = ".".join(map(str, cudnn_version_tuple(build))), ".".join(map(str, cudnn_version_tuple(runtime)))
    return (f"pyooc was built against cuDNN {b} but cuDNN {r} is loaded ({_native.cudnn_library_path() or 'path unknown'}),"
            f" probably installed by another package (torch pins its own): older cuDNN may lack what pyooc uses. "
            f"Install a matching one (pip install 'nvidia-cudnn-cu13>={b}') or rebuild pyooc against {r} "
            f"(pip install --no-binary pyooc pyooc).")


class CudnnVersionWarning(UserWarning):
    """The cuDNN loaded is older than the one pyooc was built against."""


def check_cudnn_runtime():
    message = cudnn_older_than_built()
    if message:
        warnings.warn(message, CudnnVersionWarning, stacklevel=3)


def effective_memory_limit():
    """The device budget a call without memory_limit plans with now: set_memory_limit()'s, or the
    default backend's (80% of the GPU's free memory; 1 GiB on the host backend). Read from a plan,
    so it is the number plans use."""
    from pyooc.layers import plan_activation_forward
    return plan_activation_forward((1, 1, 1, 1)).memory_limit


def info(measure_link=False):
    """Versions, devices, where cuDNN was loaded from and the effective default budget, as a dict;
    measure_link=True (and a GPU present) adds the pinned link bandwidths measured now (GB/s)."""
    from pyooc import __version__
    from pyooc.memory import get_memory_limit

    build, runtime = _native.cudnn_versions()
    devices = _native.device_count()
    result = {
        "pyooc": __version__,
        "cudnn_build": ".".join(map(str, cudnn_version_tuple(build))),
        "cudnn_runtime": ".".join(map(str, cudnn_version_tuple(runtime))),
        "cudnn_library": _native.cudnn_library_path(),
        "cuda_runtime": cuda_version_string(_native.cuda_runtime_version()),
        "device_count": devices,
        "default_backend": "cuda" if devices > 0 else "host",
        "memory_limit": effective_memory_limit(),
        "memory_limit_source": "set_memory_limit()" if get_memory_limit() else
        ("80% of the GPU's free memory" if devices > 0 else "the host backend's 1 GiB"),
    }
    warning = cudnn_older_than_built()
    if warning:
        result["cudnn_warning"] = warning
    if measure_link and devices > 0:
        bandwidth = _native.measure_link_bandwidth(0, 256 << 20)
        result.update({f"link_{k}_GBps": round(v / 1e9, 1) for k, v in bandwidth.items()})
    return result
