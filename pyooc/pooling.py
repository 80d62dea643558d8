"""Pooling out of core over host arrays (cuDNN PoolingForward; native/include/ooc/layers.hpp):
max, average counting padding, average excluding it, 1D/2D/3D. Arguments are checked with the
shared checks (pyooc/_call_args.py); libooc validates the geometry (torch's rules) and splits n, c and the spatial dims
with the window halo (the backward keeps padded dims whole)."""

import numpy as np

from pyooc import _last_stats
from pyooc._arrays import CONV_DTYPES, as_input, as_output, as_shape, as_str, spatial_tuple
from pyooc._call_args import call_options, check_dtype, raw_bytes, same_dtype, spatial_dims
from pyooc._device_arrays import caller_array, device_array, is_device_array, ready_device_arrays
from pyooc._layouts import CHANNELS_FIRST, CONV_LAYOUTS, array_layouts, call_layout, check_layout_name, empty_in
from pyooc._loader import load_native
from pyooc.progress import observed
from pyooc._unbatched import as_batch_of_one, without_batch
from pyooc.machine import accepts_machine
from pyooc.pinned_cache import new_result

_native = load_native()


def _geometry(x_shape, kernel, stride, padding):
    spatial = spatial_dims(x_shape)
    kernel = spatial_tuple(kernel, spatial, "kernel")
    stride = kernel if stride is None else spatial_tuple(stride, spatial, "stride")
    return kernel, stride, spatial_tuple(padding, spatial, "padding")


@observed
def pool_forward(x, kernel, *, stride=None, padding=0, mode="max", out=None, memory_limit=None, backend="auto",
                 device=0):
    """y = pooling of x ([N, C, *spatial], 1 to 3 spatial dims) over windows of `kernel`, as torch's
    max_pool / avg_pool: stride defaults to the kernel; mode "max", "avg" (padding counted, torch's
    count_include_pad=True) or "avg_exclude_pad". The result is a new array, or `out`. x may be
    unbatched, [C, *spatial], when kernel is a tuple of its spatial sizes (as torch's max_pool2d takes (C, H, W)).
    x may be float32, float16 or bfloat16 (y has its dtype; computed in double), C-contiguous or
    channels-last (y has x's layout; docs/layouts.md)."""
    x = _input(x, "x")
    if is_device_array(out):  # as a DeviceArray before it is given a batch dimension
        out = device_array(out, "out", CONV_DTYPES, writable=True)
    # torch's unbatched (C, *spatial), told apart by a kernel tuple of x.ndim - 1 sizes (pyooc/_unbatched.py).
    unbatched = not isinstance(kernel, (int, np.integer)) and hasattr(kernel, "__len__") and len(kernel) == x.ndim - 1
    if unbatched and CHANNELS_FIRST not in array_layouts(x):
        raise ValueError("x must be C-contiguous when unbatched ([C, *spatial]); channels-last needs a batch dimension")
    x, out = as_batch_of_one(x, unbatched, out)
    layout = call_layout({"x": x})  # y has x's layout
    mode = as_str(mode, "mode")
    _native.pool_mode(mode)
    kernel, stride, padding = _geometry(x.shape, kernel, stride, padding)
    y_shape = _native.pool_output_shape(x.shape, kernel, stride, padding)
    options = call_options(memory_limit, backend, device)
    y = _result(out, y_shape, {"x": x}, x.dtype, layout)
    ready_device_arrays({"x": x, "out": y}, options, _native)
    _last_stats.record(_native.pool_forward(x.shape, kernel, stride, padding, mode, raw_bytes(x), raw_bytes(y),
                                            options, str(x.dtype), layout))
    return caller_array(without_batch(y, unbatched))


@accepts_machine
def plan_pool_forward(x_shape, kernel, *, stride=None, padding=0, dtype="float32", memory_limit=None,
                      backend="auto", device=0, layout="channels_first"):
    """The Plan pool_forward would run for this shape and geometry, without running it (layout:
    the arrays', "channels_first" or "channels_last")."""
    return _plan(_native.plan_pool_forward, x_shape, kernel, stride, padding, dtype, memory_limit, backend, device,
                 layout)


def _plan(native_plan, x_shape, kernel, stride, padding, dtype, memory_limit, backend, device, layout):
    dtype = check_dtype(dtype, CONV_DTYPES)
    layout = check_layout_name(layout)
    x_shape = as_shape(x_shape, "x_shape")
    kernel, stride, padding = _geometry(x_shape, kernel, stride, padding)
    return native_plan(x_shape, kernel, stride, padding, call_options(memory_limit, backend, device), dtype, layout)


def _input(array, name):
    """A pooling tensor as a zero-copy view: C-contiguous or channels-last (pyooc/_layouts.py)."""
    return as_input(array, name, CONV_DTYPES, device_arrays=True, layouts=CONV_LAYOUTS)


def _result(out, shape, inputs, dtype, layout):
    """A new result array in the call's layout, or the caller's out checked against it."""
    return empty_in(shape, dtype, layout, new_result) if out is None else \
        as_output(out, shape, inputs, dtype, True, layout)


@observed
def pool_backward(y, dy, x, kernel, *, stride=None, padding=0, mode="max", out=None, memory_limit=None,
                  backend="auto", device=0):
    """dx, the gradient of pool_forward (same kernel, stride, padding, mode) at x for dy; y is
    pool_forward's result (max pooling routes each dy to its window's maximum). dx is tiled
    disjointly; overlapping windows (stride < kernel) are handled like conv_backward_data's. y, dy
    and x share one dtype (float32, float16 or bfloat16), dx's."""
    x = _input(x, "x")
    y = same_dtype(_input(y, "y"), "y", x, "x")
    dy = same_dtype(_input(dy, "dy"), "dy", x, "x")
    layout = call_layout({"x": x, "y": y, "dy": dy})  # dx has their layout
    mode = as_str(mode, "mode")
    _native.pool_mode(mode)
    kernel, stride, padding = _geometry(x.shape, kernel, stride, padding)
    y_shape = _native.pool_output_shape(x.shape, kernel, stride, padding)
    for name, a in (("y", y), ("dy", dy)):
        if a.shape != tuple(y_shape):
            raise ValueError(f"{name} has shape {list(a.shape)}, expected {list(y_shape)} (pool_forward's output "
                             f"for x of shape {list(x.shape)})")
    options = call_options(memory_limit, backend, device)
    dx = _result(out, x.shape, {"y": y, "dy": dy, "x": x}, x.dtype, layout)
    ready_device_arrays({"y": y, "dy": dy, "x": x, "out": dx}, options, _native)
    _last_stats.record(_native.pool_backward(x.shape, kernel, stride, padding, mode, raw_bytes(y), raw_bytes(dy),
                                             raw_bytes(x), raw_bytes(dx), options, str(x.dtype), layout))
    return caller_array(dx)


@accepts_machine
def plan_pool_backward(x_shape, kernel, *, stride=None, padding=0, dtype="float32", memory_limit=None,
                       backend="auto", device=0, layout="channels_first"):
    """The Plan pool_backward would run, without running it."""
    return _plan(_native.plan_pool_backward, x_shape, kernel, stride, padding, dtype, memory_limit, backend, device,
                 layout)
