"""Activation, softmax and add-tensor out of core over host arrays (cuDNN's ActivationForward /
Backward, SoftmaxForward / Backward, AddTensor; native/include/ooc/layers.hpp). Arrays are checked
(pyooc/_arrays.py, pyooc/_call_args.py) and reshaped to [n, c, spatial...] without copying; libooc
plans the split and runs it with the GIL released."""

import math

import numpy as np

from pyooc import _last_stats
from pyooc._arrays import CONV_DTYPES, as_float, as_input, as_output, as_shape, as_str
from pyooc._call_args import call_options, check_dtype, raw_bytes, same_dtype
from pyooc._device_arrays import DeviceArray, caller_array, ready_device_arrays
from pyooc._layouts import (CHANNELS_FIRST, CHANNELS_LAST, CONV_LAYOUTS, call_layout, channel_rows, dense_order,
                            empty_in)
from pyooc._loader import load_native
from pyooc.progress import observed
from pyooc.machine import accepts_machine
from pyooc.pinned_cache import new_result

_native = load_native()



def _flat_extent(shape, dims, operation):
    # The product of `dims` of `shape`, exactly (np.prod wraps around int64): a shape libooc would
    # refuse is refused here, in its wording (layer_problem, checked_size.hpp), before a flattened
    # dim could wrap or pass int64.
    if any(d <= 0 for d in shape):
        raise ValueError(f"{operation}: every dimension must be positive, got {list(shape)}")
    if math.prod(shape) * 4 > _MAX_TENSOR_BYTES:
        raise ValueError(f"{operation}: the tensor of size {list(shape)} is too large: pyooc indexes tensors of up "
                         "to 2^60 bytes")
    return math.prod(dims)


_MAX_TENSOR_BYTES = 1 << 60  # native/src/plan/checked_size.hpp's kMaxTensorBytes


def _activation_shape(shape, operation):
    # Element-wise: any shape; one flat run, so chunks are contiguous ranges of it.
    return (1, 1, _flat_extent(shape, shape, operation))


def _softmax_shape(shape, name, operation, layout=CHANNELS_FIRST, mode="channel"):
    # [n, c] and [n, c, spatial...] up to 3 spatial dims; space flattens into one dim. A
    # channels-last array is handed over as its memory is: its channel rows for mode "channel",
    # which a channel-mode softmax of [rows, c, 1] reduces over; [n, space, c] for "instance",
    # which reduces over a whole sample in any order.
    if len(shape) < 2:
        raise ValueError(f"{name} must have at least 2 dimensions [N, C, ...], got shape {list(shape)}")
    space = _flat_extent(shape, shape[2:], operation)
    if layout != CHANNELS_LAST:
        return (shape[0], shape[1], space)
    return (*channel_rows(shape), 1) if mode == "channel" else (shape[0], space, shape[1])


def _coef(mode, coef):
    # coef's meaning and default per mode come from libooc (ValueError listing the modes).
    what, default, _ = _native.activation_traits(as_str(mode, "mode"))
    if not what:
        return 0.0 if coef is None else as_float(coef, "coef")
    if coef is None:
        if default is None:
            raise ValueError(f"mode '{mode}' needs coef (the {what})")
        return default
    return as_float(coef, "coef")


def _out(out, shape, inputs, in_place_ok, dtype=np.float32, layout=CHANNELS_FIRST):
    """A new array of `dtype` in `layout`, or the caller's out checked (dense in `layout`); out may
    be the input in_place_ok itself (in place), a device array too."""
    if out is None:
        return empty_in(shape, dtype, layout, new_result)
    if isinstance(in_place_ok, DeviceArray) and out is in_place_ok.owner:
        out = in_place_ok
    others = {name: a for name, a in inputs.items() if not (out is in_place_ok and a is out)}
    return as_output(out, shape, others, dtype, device_arrays=True, layout=layout)


def _device(name, array, layouts=None):
    """as_input for these layers: device-resident arrays read in place (pyooc/_device_arrays.py);
    layouts: CONV_LAYOUTS for the element-wise ones, which take channels-last arrays too."""
    return as_input(array, name, CONV_DTYPES, device_arrays=True, layouts=layouts or (CHANNELS_FIRST,))


def _in_memory_order(shape, layout):
    """An element-wise layer's shape as libooc sees the arrays' memory: channels-last arrays are
    handed over in their dense order (N, spatial..., C), where element-wise math and add_tensor's
    broadcasting (a dimension of a is 1 or c's, in any order) mean the same."""
    return tuple(shape[d] for d in dense_order(len(shape), layout))


def _same_shape(ref_name, ref, **arrays):
    for name, a in arrays.items():
        if a.shape != ref.shape:
            raise ValueError(f"{name} has shape {list(a.shape)}, expected {list(ref.shape)} (the shape of {ref_name})")


@observed
def activation_forward(x, mode, *, coef=None, out=None, memory_limit=None, backend="auto", device=0):
    """y = f(x) element-wise, f one of "relu", "sigmoid", "tanh", "clipped_relu" (coef: the
    ceiling, required), "elu" (coef: alpha, default 1), "swish" (coef: beta, default 1), "gelu"
    (exact, torch's default) and "leaky_relu" (coef: negative_slope, default 0.01). `out` may be
    x itself (in place). x may be float32, float16 or bfloat16 (y has its dtype; on the GPU, half
    precision for the modes cuDNN has: relu, sigmoid, tanh, clipped_relu, elu, swish). x may be
    channels-last (element-wise: y has x's layout; docs/layouts.md)."""
    x, mode = _device("x", x, CONV_LAYOUTS), as_str(mode, "mode")
    c = _coef(mode, coef)
    options = call_options(memory_limit, backend, device)
    y = _out(out, x.shape, {"x": x}, in_place_ok=x, dtype=x.dtype, layout=call_layout({"x": x}))
    flat = _activation_shape(x.shape, "activation_forward")
    ready_device_arrays({"x": x, "out": y}, options, _native)
    _last_stats.record(_native.activation_forward(flat, mode, c, raw_bytes(x), raw_bytes(y), options, str(x.dtype)))
    return caller_array(y)


@observed
def activation_backward(y, dy, x, mode, *, coef=None, out=None, memory_limit=None, backend="auto", device=0):
    """dx = f'(x) * dy for y = activation_forward(x, mode, coef=coef). `out` may be dy (in place).
    y, dy and x share one dtype (float32, float16 or bfloat16), dx's."""
    y = _device("y", y, CONV_LAYOUTS)
    dy = same_dtype(_device("dy", dy, CONV_LAYOUTS), "dy", y, "y")
    x = same_dtype(_device("x", x, CONV_LAYOUTS), "x", y, "y")
    _same_shape("y", y, dy=dy, x=x)
    layout = call_layout({"y": y, "dy": dy, "x": x})  # element-wise over memory: one layout for all
    mode = as_str(mode, "mode")
    c = _coef(mode, coef)
    options = call_options(memory_limit, backend, device)
    dx = _out(out, y.shape, {"y": y, "dy": dy, "x": x}, in_place_ok=dy, dtype=y.dtype, layout=layout)
    flat = _activation_shape(y.shape, "activation_backward")
    ready_device_arrays({"y": y, "dy": dy, "x": x, "out": dx}, options, _native)
    _last_stats.record(_native.activation_backward(flat, mode, c, raw_bytes(y), raw_bytes(dy), raw_bytes(x),
                                                   raw_bytes(dx), options, str(y.dtype)))
    return caller_array(dx)


@accepts_machine
def plan_activation_forward(shape, *, dtype="float32", memory_limit=None, backend="auto", device=0):
    """The Plan activation_forward would run for this shape (splits over the flattened tensor: "w")."""
    dtype = check_dtype(dtype, CONV_DTYPES)
    flat = _activation_shape(as_shape(shape, "shape"), "activation_forward")
    return _native.plan_layer("activation_forward", flat, "", (), False, call_options(memory_limit, backend, device),
                              dtype)


@accepts_machine
def plan_activation_backward(shape, *, mode=None, dtype="float32", memory_limit=None, backend="auto", device=0):
    """The Plan activation_backward would run. relu, sigmoid and tanh stream y and dy only (their
    gradient follows from y); the other modes stream x too, and so does mode=None (the most traffic
    any mode moves)."""
    dtype = check_dtype(dtype, CONV_DTYPES)
    mode = "elu" if mode is None else as_str(mode, "mode")  # elu: a mode whose gradient reads x
    flat = _activation_shape(as_shape(shape, "shape"), "activation_backward")
    return _native.plan_layer("activation_backward", flat, mode, (), False, call_options(memory_limit, backend, device),
                              dtype)


@observed
def softmax_forward(x, *, mode="channel", log=False, out=None, memory_limit=None, backend="auto", device=0):
    """y = softmax(x) (log: log-softmax) over C for each sample and position (mode "channel",
    torch's dim=1) or over C and all positions for each sample ("instance"). The reduced axes are
    never split; MemoryError when they alone exceed memory_limit. `out` may be x (in place).
    x may be float32, float16 or bfloat16 (y has its dtype; computed in float32 or double), and
    channels-last (y has x's layout; docs/layouts.md)."""
    x = _device("x", x, CONV_LAYOUTS)
    mode = as_str(mode, "mode")
    _native.softmax_mode(mode)
    layout = call_layout({"x": x})
    shape = _softmax_shape(x.shape, "x", "softmax_forward", layout, mode)
    options = call_options(memory_limit, backend, device)
    y = _out(out, x.shape, {"x": x}, in_place_ok=x, dtype=x.dtype, layout=layout)
    ready_device_arrays({"x": x, "out": y}, options, _native)
    _last_stats.record(_native.softmax_forward(shape, mode, bool(log), raw_bytes(x), raw_bytes(y), options,
                                               str(x.dtype)))
    return caller_array(y)


@observed
def softmax_backward(y, dy, *, mode="channel", log=False, out=None, memory_limit=None, backend="auto", device=0):
    """dx, the gradient of softmax_forward (with the same mode and log) at y for dy. `out` may be dy.
    y and dy share one dtype (float32, float16 or bfloat16) and one layout, dx's."""
    y = _device("y", y, CONV_LAYOUTS)
    dy = same_dtype(_device("dy", dy, CONV_LAYOUTS), "dy", y, "y")
    _same_shape("y", y, dy=dy)
    mode = as_str(mode, "mode")
    _native.softmax_mode(mode)
    layout = call_layout({"y": y, "dy": dy})
    shape = _softmax_shape(y.shape, "y", "softmax_backward", layout, mode)
    options = call_options(memory_limit, backend, device)
    dx = _out(out, y.shape, {"y": y, "dy": dy}, in_place_ok=dy, dtype=y.dtype, layout=layout)
    ready_device_arrays({"y": y, "dy": dy, "out": dx}, options, _native)
    _last_stats.record(_native.softmax_backward(shape, mode, bool(log), raw_bytes(y), raw_bytes(dy), raw_bytes(dx),
                                                options, str(y.dtype)))
    return caller_array(dx)


def _plan_softmax(operation, shape, mode, dtype, memory_limit, backend, device):
    dtype = check_dtype(dtype, CONV_DTYPES)
    mode = as_str(mode, "mode")
    return _native.plan_layer(operation, _softmax_shape(as_shape(shape, "shape"), "shape", operation), mode, (), False,
                              call_options(memory_limit, backend, device), dtype)


@accepts_machine
def plan_softmax_forward(shape, *, mode="channel", dtype="float32", memory_limit=None, backend="auto", device=0):
    return _plan_softmax("softmax_forward", shape, mode, dtype, memory_limit, backend, device)


@accepts_machine
def plan_softmax_backward(shape, *, mode="channel", dtype="float32", memory_limit=None, backend="auto", device=0):
    return _plan_softmax("softmax_backward", shape, mode, dtype, memory_limit, backend, device)


def _add_shapes(a_shape, c_shape):
    """Both as rank 3 to 5 [n, c, spatial...] (rank 1-2 padded with trailing 1s); errors name a and c."""
    if len(a_shape) != len(c_shape):
        raise ValueError(f"a must have as many dimensions as c (cuDNN AddTensor broadcasting): a has shape "
                         f"{list(a_shape)}, c has shape {list(c_shape)}")
    if len(c_shape) > 5:
        raise ValueError(f"c must have at most 5 dimensions, got shape {list(c_shape)}")
    for i, (da, dc) in enumerate(zip(a_shape, c_shape)):
        if da != 1 and da != dc:
            raise ValueError(f"a of shape {list(a_shape)} does not broadcast to c of shape {list(c_shape)}: "
                             f"dimension {i} of a must be 1 or {dc}, got {da}")
    pad = (1,) * max(0, 3 - len(c_shape))
    return tuple(a_shape) + pad, tuple(c_shape) + pad


@observed
def add_tensor(a, c, *, alpha=1.0, beta=1.0, out=None, memory_limit=None, backend="auto", device=0):
    """alpha * a + beta * c, a broadcast over c (cuDNN AddTensor: each dim of a is 1 or c's). The
    result is a new array, or `out`; out=c adds in place. c (and a, and out) may be channels-last
    (a [1, C, 1, 1] bias fits either layout); the result has c's layout (docs/layouts.md). a and c share one dtype (float32, float16
    or bfloat16), the result's; computed in double."""
    a = _device("a", a, CONV_LAYOUTS)
    c = same_dtype(_device("c", c, CONV_LAYOUTS), "c", a, "a")
    alpha, beta = as_float(alpha, "alpha"), as_float(beta, "beta")
    _add_shapes(a.shape, c.shape)  # checked in the caller's (logical) shapes
    layout = call_layout({"c": c, "a": a})  # a bias [1, C, 1, 1] fits either: c decides
    a_shape, c_shape = _add_shapes(_in_memory_order(a.shape, layout), _in_memory_order(c.shape, layout))
    options = call_options(memory_limit, backend, device)
    out = _out(out, c.shape, {"a": a, "c": c}, c, dtype=c.dtype, layout=layout)
    ready_device_arrays({"a": a, "c": c, "out": out}, options, _native)
    _last_stats.record(_native.add_tensor(a_shape, c_shape, alpha, raw_bytes(a), beta, raw_bytes(c), raw_bytes(out),
                                          options, str(c.dtype)))
    return caller_array(out)


@accepts_machine
def plan_add_tensor(a_shape, c_shape, *, in_place=False, dtype="float32", memory_limit=None, backend="auto",
                    device=0):
    """The Plan add_tensor would run (in_place: out is c)."""
    dtype = check_dtype(dtype, CONV_DTYPES)
    a_shape, c_shape = _add_shapes(as_shape(a_shape, "a_shape"), as_shape(c_shape, "c_shape"))
    return _native.plan_layer("add_tensor", c_shape, "", a_shape, bool(in_place),
                              call_options(memory_limit, backend, device), dtype)
