"""Checks that turn caller arrays into zero-copy views of their dtype, with errors that name the argument."""

import operator

import ml_dtypes
import numpy as np

from pyooc._device_arrays import DeviceArray, device_array, is_device_array
from pyooc._foreign_arrays import host_array
from pyooc._layouts import CHANNELS_FIRST, CHANNELS_LAST, CONTIGUOUS_ONLY, layouts_of


FLOAT32 = (np.dtype(np.float32),)
# What the convolutions and their gradients compute in (half precision: numpy's float16 and
# ml_dtypes' bfloat16, computed in float32 by libooc).
CONV_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def dtype_names(dtypes):
    names = [str(d) for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def as_input(array, name, dtypes=FLOAT32, device_arrays=False, layouts=CONTIGUOUS_ONLY):
    """A C-contiguous ndarray of one of `dtypes` viewing the caller's memory (buffer protocol, no copy).
    device_arrays: the function reads device-resident arrays in place (a DeviceArray for those,
    pyooc/_device_arrays.py); elsewhere they are refused, naming the argument. layouts: the memory
    layouts the function serves (pyooc/_layouts.py); a channels-last array elsewhere is a
    NotImplementedError, any other strides a ValueError, never a copy."""
    if array is None:
        raise TypeError(f"{name} must be an array, got None")
    if device_arrays and isinstance(array, DeviceArray):  # made by a front end (pyooc.torch)
        if array.dtype not in dtypes:
            raise TypeError(f"{name} must have dtype {dtype_names(dtypes)}, got {array.dtype}")
        check_layout(array, name, layouts)
        return array
    if device_arrays and is_device_array(array):
        return check_layout(device_array(array, name, dtypes), name, layouts)
    try:
        view = host_array(array, name)  # buffer protocol, __array_interface__ or CPU DLPack, zero-copy
    except TypeError as exc:
        if "device-resident" in str(exc):
            raise
        raise TypeError(f"{name} must be an array supporting the buffer protocol or DLPack, "
                        f"got {type(array).__name__}") from exc
    except Exception as exc:  # objects numpy cannot view at all
        raise TypeError(f"{name} must be an array supporting the buffer protocol or DLPack, "
                        f"got {type(array).__name__}") from exc
    if view.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {dtype_names(dtypes)}, got {view.dtype} "
                        f"(pyooc does not convert silently: that would copy the whole tensor)")
    check_layout(view, name, layouts)
    if view.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {list(view.shape)}")
    return view


def check_layout(array, name, layouts=CONTIGUOUS_ONLY):
    """array, when its strides are dense in one of `layouts`: channels-last where the function does
    not serve it yet is a NotImplementedError, other strides a ValueError saying what is served."""
    strides = getattr(array, "strides", None)
    found = layouts_of(array.shape, strides, array.dtype.itemsize)
    if array.size == 0 or any(layout in layouts for layout in found):  # empty: refused next, as empty
        return array
    copy = f"np.ascontiguousarray({name}) makes a copy that is"
    if CHANNELS_LAST in found:
        raise NotImplementedError(f"{name} is channels-last (NHWC strides): this function serves C-contiguous "
                                  f"arrays only so far ({copy}; docs/layouts.md lists what takes channels-last)")
    if CHANNELS_LAST in layouts:
        raise ValueError(f"{name} must be C-contiguous or channels-last (the strides torch's "
                         f"memory_format=torch.channels_last gives); {copy}")
    raise ValueError(f"{name} must be C-contiguous ({copy})")


def as_output(out, shape, inputs, dtype=np.float32, device_arrays=False, layout=CHANNELS_FIRST):
    """Checks the caller's `out=` array, host or (device_arrays: as for as_input) device: shape,
    dtype (the inputs'), writable, dense in the call's `layout` (its inputs'), not sharing memory
    with inputs."""
    if device_arrays and (isinstance(out, DeviceArray) or is_device_array(out)):
        out = out if isinstance(out, DeviceArray) else device_array(out, "out", (np.dtype(dtype),), writable=True)
        writable, overlaps = not out.readonly, out.overlaps
    else:
        if out is not None and not isinstance(out, np.ndarray) and (
                hasattr(out, "__dlpack__") or hasattr(out, "__cuda_array_interface__")):
            out = host_array(out, "out")  # a CPU DLPack array (torch CPU, ...) viewed in place
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy.ndarray or a CPU DLPack array, got {type(out).__name__}")
        writable = out.flags.writeable

        def overlaps(array):  # a device array never shares a host array's memory
            return array is not None and not isinstance(array, DeviceArray) and np.may_share_memory(out, array)
    if out.dtype != dtype:
        raise TypeError(f"out must have dtype {np.dtype(dtype)}, got {out.dtype}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {list(out.shape)}, expected {list(shape)}")
    if not writable:
        raise ValueError("out is read-only")
    _out_layout(out, layout)
    for name, array in inputs.items():
        if overlaps(array):
            raise ValueError(f"out overlaps {name}: the output must not share memory with an input")
    return out


def _out_layout(out, layout):
    """out, when dense in the call's layout (the result has x's layout, as torch's)."""
    if layout in layouts_of(out.shape, getattr(out, "strides", None), out.dtype.itemsize):
        return out
    if layout == CHANNELS_LAST:
        raise ValueError("out must be channels-last, as the inputs are (the result takes x's layout)")
    raise ValueError("out must be C-contiguous")


def spatial_tuple(value, spatial_dims, name):
    """An int or a sequence of spatial_dims ints (as torch accepts), as a tuple; type errors name the argument."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or a tuple of ints, got bool")
    try:
        operator.index(value)
        return (as_int(value, name),)
    except TypeError:
        pass
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or a tuple of ints, got {type(value).__name__}") from None
    if len(items) != spatial_dims:
        raise ValueError(f"{name} must be an int or a tuple of {spatial_dims} ints, got {list(items)}")
    return tuple(as_int(v, name) for v in items)


INT64 = (-2**63, 2**63 - 1)


def as_int(value, name, low=INT64[0], high=INT64[1]):
    """An int in [low, high] (by default what libooc's int64 holds): TypeError for a non-int,
    ValueError naming the argument outside the range, never an OverflowError from the binding."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def as_str(value, name):
    """value as a str (numpy.str_ and other str subclasses become plain str, as the bindings take)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return str(value)


def as_float(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def as_shape(shape, name):
    try:
        items = tuple(shape)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {type(shape).__name__}") from None
    return tuple(as_int(d, name) for d in items)
