"""Out-of-core convolution over host arrays. Each function checks its Python arguments here and
hands flat zero-copy views to libooc (native/include/ooc/ooc.hpp), which validates the geometry,
plans the split and runs it with the GIL released."""

import threading

import numpy as np

from pyooc._arrays import as_float, as_input, as_int, as_output, as_shape, spatial_tuple
from pyooc._loader import load_native
from pyooc.memory import parse_memory_limit

_native = load_native()
_BACKENDS = ("auto", "cuda", "host")
_last = threading.local()


def _common(spatial_dims, stride, padding, dilation, groups, alpha, beta, memory_limit, backend, device):
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    return dict(
        stride=spatial_tuple(stride, spatial_dims, "stride"),
        padding=spatial_tuple(padding, spatial_dims, "padding"),
        dilation=spatial_tuple(dilation, spatial_dims, "dilation"),
        groups=as_int(groups, "groups"),
        alpha=as_float(alpha, "alpha"),
        beta=as_float(beta, "beta"),
        memory_limit=parse_memory_limit(memory_limit) or 0,
        backend=backend,
        device=as_int(device, "device"),
    )


def _spatial_dims(w_shape):
    # Geometry errors (rank 3-5 etc.) are reported by libooc; here only pick a count that parses.
    return min(max(len(w_shape) - 2, 1), 3)


def _check_dtype(dtype):
    if np.dtype(dtype) != np.float32:
        raise TypeError(f"dtype must be float32 (other dtypes are planned), got {np.dtype(dtype)}")


def _conv_inputs(x, w, bias):
    """x, w and bias (or None) as zero-copy views, bias checked against w's output channels."""
    x = as_input(x, "x")
    w = as_input(w, "w")
    if bias is not None:
        bias = as_input(bias, "bias")
        if bias.ndim != 1 or bias.shape[0] != w.shape[0]:
            raise ValueError(f"bias must have shape [{w.shape[0]}] (one per output channel), got {list(bias.shape)}")
    return x, w, bias


def _record_stats(plan, stats):
    """Keeps what a call measured for last_stats()."""
    stats["plan"] = plan
    _last.stats = stats


def plan_conv_forward(x_shape, w_shape, *, bias=False, stride=1, padding=0, dilation=1, groups=1, alpha=1.0,
                      beta=0.0, dtype="float32", memory_limit=None, backend="auto", device=0, pinned=False):
    """The Plan conv_forward would run for these shapes and options, without running it.

    bias: whether a bias is added (its K floats stay on the device). Raises MemoryError, saying how
    much the smallest plan needs, when nothing fits memory_limit. pinned: plan for pinned arrays
    (DMA only; conv_forward does so when every array it gets is pinned) rather than pageable ones
    (gathered and scattered by host workers, a cost that favours other splits)."""
    x_shape = as_shape(x_shape, "x_shape")
    w_shape = as_shape(w_shape, "w_shape")
    _check_dtype(dtype)
    o = _common(_spatial_dims(w_shape), stride, padding, dilation, groups, alpha, beta, memory_limit, backend, device)
    return _native.plan_conv_forward(x_shape, w_shape, o["stride"], o["padding"], o["dilation"], o["groups"],
                                     o["alpha"], o["beta"], bool(bias), o["memory_limit"], o["backend"], o["device"],
                                     bool(pinned))


def conv_forward(x, w, *, bias=None, stride=1, padding=0, dilation=1, groups=1, alpha=1.0, beta=0.0, out=None,
                 memory_limit=None, backend="auto", device=0):
    """y = alpha * conv(x, w) + beta * out + bias, computed out of core.

    Like torch.nn.functional.conv1d/2d/3d (cross-correlation; x [N, C, *spatial], w [K, C/groups,
    *kernel], bias [K]), plus cuDNN's alpha/beta and a device-memory budget. x, w and bias go in
    zero-copy (float32, C-contiguous, any buffer-protocol array: numpy, memory-mapped, pinned) and
    are never written. The result is a new array, or `out` (which beta then scales; beta != 0 needs
    out). memory_limit caps device bytes for this call (int or "512MiB"; default: set_memory_limit()).
    backend: "auto" (GPU when present), "cuda" or "host" (CPU reference, same chunking)."""
    x, w, bias = _conv_inputs(x, w, bias)
    o = _common(_spatial_dims(w.shape), stride, padding, dilation, groups, alpha, beta, memory_limit, backend, device)
    # Validates the geometry (ValueError naming the argument) before anything is allocated.
    y_shape = _native.conv_output_shape(x.shape, w.shape, o["stride"], o["padding"], o["dilation"], o["groups"])
    if out is None:
        if o["beta"] != 0.0:
            raise ValueError("beta != 0 needs out= (y = alpha * conv(x, w) + beta * out)")
        out = np.empty(y_shape, dtype=np.float32)
    else:
        as_output(out, y_shape, {"x": x, "w": w, "bias": bias})
    plan, stats = _native.conv_forward(
        x.reshape(-1), x.shape, w.reshape(-1), w.shape, None if bias is None else bias.reshape(-1), out.reshape(-1),
        o["stride"], o["padding"], o["dilation"], o["groups"], o["alpha"], o["beta"], o["memory_limit"],
        o["backend"], o["device"])
    _record_stats(plan, stats)
    return out


def last_stats():
    """What the calling thread's last call (conv_forward or a gradient) measured: bytes over each
    link direction, device bytes reserved, chunks, seconds by stage, and the Plan it ran ("plan")."""
    return getattr(_last, "stats", None)
