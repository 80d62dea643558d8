"""Fused out-of-core functions (ooc_cuDNN's fused layers; native/include/ooc/fused.hpp): several
operations in one pass over the chunks, the intermediates kept on the GPU. On a link-bound GPU the
fastest byte is the one never moved, so each function moves what its unfused composition reads and
writes once, not once per operation. Each has a plan_* twin whose Plan reports the bytes it moves
(bytes_h2d, bytes_d2h). Arguments are checked with the shared checks (pyooc/_call_args.py); libooc
validates the geometry. Every function takes float32, float16 and bfloat16 (one dtype a call, the
results in it; the backwards sum dw and db in float32: docs/dtypes.md), and device-resident arrays
(__cuda_array_interface__), read and written in place."""

import numpy as np

from pyooc import _last_stats
from pyooc._arrays import CONV_DTYPES, as_input, as_output, as_shape, as_str, spatial_tuple
from pyooc._call_args import bias_input, check_dtype, conv_args, conv_inputs, raw_bytes, same_dtype, spatial_dims
from pyooc._device_arrays import caller_array, ready_device_arrays
from pyooc._loader import load_native
from pyooc.progress import observed
from pyooc.layers import _coef
from pyooc.machine import accepts_machine
from pyooc.precision import accepts_math
from pyooc.pinned_cache import new_result

_native = load_native()
_NEEDS_Z = "alpha2 != 0 needs z (y = act(alpha1 * conv(x, w) + alpha2 * z + bias))"


def _activation_coef(activation, coef):
    """(activation, coef) as libooc takes them: "identity" has no coef; the others as
    activation_forward's modes, with its coef as activation_forward takes it."""
    activation = as_str(activation, "activation")
    _native.fused_activation(activation, 0.0)  # ValueError listing the names
    return activation, 0.0 if activation == "identity" else _coef(activation, coef)


def _z_input(z, y_shape, alpha2, x):
    """z as a zero-copy view of y's shape and x's dtype, or None; alpha2 != 0 needs one."""
    if z is None:
        if alpha2 != 0.0:
            raise ValueError(_NEEDS_Z)
        return None
    z = same_dtype(as_input(z, "z", CONV_DTYPES, device_arrays=True), "z", x, "x")
    if z.shape != tuple(y_shape):
        raise ValueError(f"z has shape {list(z.shape)}, expected {list(y_shape)} (the shape of y)")
    return z


def _forward_output(out, y_shape, x, w, bias, z, alpha2):
    """(out, whether z is read): a new y of x's dtype, or the caller's out checked (it may be z: in
    place)."""
    if out is None:
        out = new_result(y_shape, x.dtype)
    else:
        inputs = {"x": x, "w": w, "bias": bias}
        # out= z runs in place (for a device z, out is the caller's object that z views).
        if z is not None and out is not z and out is not caller_array(z):
            inputs["z"] = z
        out = as_output(out, y_shape, inputs, x.dtype, device_arrays=True)
    return out, z is not None and alpha2 != 0.0


def _ready(arrays, o):
    """Waits for the producers of the call's device arrays (checked against where it runs)."""
    ready_device_arrays(arrays, o["options"], _native)


def _plan_forward_args(x_shape, w_shape, dtype, z, stride, padding, dilation, groups, alpha1, alpha2, memory_limit,
                       backend, device, pinned, transposed=False, padding_mode="zeros"):
    """A fused forward's plan twin's arguments checked: (x_shape, w_shape, o as _geometry gives it,
    with o["dtype"] the dtype's name); z: whether the call gets a z (alpha2 != 0 needs one);
    transposed: a transposed convolution (no padding strings)."""
    x_shape = as_shape(x_shape, "x_shape")
    w_shape = as_shape(w_shape, "w_shape")
    dtype = check_dtype(dtype, CONV_DTYPES)
    o = _geometry(w_shape, stride, padding, dilation, groups, alpha1, alpha2, memory_limit, backend, device, pinned,
                  None if transposed else w_shape[2:], padding_mode)
    if not z and o["alpha2"] != 0.0:
        raise ValueError(_NEEDS_Z)
    o["dtype"] = dtype
    return x_shape, w_shape, o


def _geometry(w_shape, stride, padding, dilation, groups, alpha1, alpha2, memory_limit, backend, device,
              pinned=False, kernel=None, padding_mode="zeros"):
    """conv_args with cuDNN's fused names for the scales (alpha1: the convolution's, alpha2: z's);
    kernel as conv_args takes it (None: no padding strings). The fused forms pad with zeros only:
    their planner leaves every padding to cuDNN (it refuses asymmetric padding too), where a
    padding_mode needs the explicit halo of the separate conv_forward."""
    o = conv_args(spatial_dims(w_shape), stride, padding, dilation, groups, alpha1, alpha2, memory_limit, backend,
                  device, pinned, kernel, padding_mode=padding_mode)
    if o["padding_mode"] != "zeros":
        raise NotImplementedError(
            f"padding_mode={o['padding_mode']!r} is not supported by the fused forward: it pads with zeros only; "
            "use conv_forward(..., padding_mode=...) followed by add_tensor and activation_forward")
    o["alpha1"], o["alpha2"] = o.pop("alpha"), o.pop("beta")
    return o


@accepts_math
@observed
def conv_bias_activation_forward(x, w, bias=None, *, activation="relu", coef=None, z=None, alpha1=1.0, alpha2=0.0,
                                 stride=1, padding=0, dilation=1, groups=1, out=None, memory_limit=None,
                                 backend="auto", device=0, padding_mode="zeros"):
    """y = act(alpha1 * conv(x, w) + alpha2 * z + bias) in one out-of-core pass (cuDNN's
    ConvolutionBiasActivationForward).

    Replaces the composition
        y = conv_forward(x, w, alpha=alpha1, stride=, padding=, dilation=, groups=)
        y = add_tensor(z, y, alpha=alpha2, beta=1)            (when z is given)
        y = add_tensor(bias.reshape(1, K, 1, ...), y)          (when bias is given)
        y = activation_forward(y, activation, coef=coef)       (unless activation == "identity")
    whose x, w, bias, stride, padding, dilation, groups and memory_limit it takes as they are; z
    ([N, K, *out], y's shape) starts each output tile on the device, bias and the activation are
    applied there, and only the finished y crosses back: x, w, z and y cross the link once each,
    instead of y five times. activation: "identity" or one of activation_forward's modes (coef as
    activation_forward takes it).
    alpha2 != 0 needs z; as in cuDNN, z is not read when alpha2 == 0. The result is a new array, or
    `out` (which may be z itself: in place). padding_mode: "zeros" only (NotImplementedError
    otherwise, naming the composition that takes it)."""
    x, w, bias = conv_inputs(x, w, bias)
    activation, coef = _activation_coef(activation, coef)
    o = _geometry(w.shape, stride, padding, dilation, groups, alpha1, alpha2, memory_limit, backend, device,
                  kernel=w.shape[2:], padding_mode=padding_mode)
    y_shape = _native.conv_output_shape(x.shape, w.shape, o["stride"], o["padding"], o["dilation"], o["groups"])
    z = _z_input(z, y_shape, o["alpha2"], x)
    out, read_z = _forward_output(out, y_shape, x, w, bias, z, o["alpha2"])
    _ready({"x": x, "w": w, "bias": bias, "z": z, "out": out}, o)
    _last_stats.record(_native.conv_bias_activation_forward(
        raw_bytes(x), x.shape, raw_bytes(w), w.shape, raw_bytes(z) if read_z else None, raw_bytes(bias),
        raw_bytes(out), activation, coef, o["stride"], o["padding"], o["dilation"], o["groups"], o["alpha1"],
        o["alpha2"] if read_z else 0.0, o["options"], str(x.dtype)))
    return caller_array(out)


@accepts_math
@accepts_machine
def plan_conv_bias_activation_forward(x_shape, w_shape, *, bias=True, z=False, alpha1=1.0, alpha2=0.0, stride=1,
                                      padding=0, dilation=1, groups=1, dtype="float32", memory_limit=None,
                                      backend="auto", device=0, pinned=False, padding_mode="zeros"):
    """The Plan conv_bias_activation_forward would run, without running it: the forward planner's,
    with z read in place of y where alpha2 != 0 (z: whether a z is given). bytes_h2d / bytes_d2h
    are what the call moves. pinned: plan for pinned arrays (as plan_conv_forward)."""
    x_shape, w_shape, o = _plan_forward_args(x_shape, w_shape, dtype, z, stride, padding, dilation, groups, alpha1,
                                             alpha2, memory_limit, backend, device, pinned,
                                             padding_mode=padding_mode)
    return _native.plan_conv_bias_activation_forward(
        x_shape, w_shape, o["stride"], o["padding"], o["dilation"], o["groups"], o["alpha1"],
        o["alpha2"] if z else 0.0, bool(bias), o["options"], o["dtype"])


def _pool_geometry(spatial, kernel, stride, padding, mode):
    """The pooling's kernel, stride (default: the kernel, as torch) and padding as tuples, mode checked."""
    _native.pool_mode(as_str(mode, "pool_mode"))
    kernel = spatial_tuple(kernel, spatial, "pool_kernel")
    stride = kernel if stride is None else spatial_tuple(stride, spatial, "pool_stride")
    return kernel, stride, spatial_tuple(padding, spatial, "pool_padding")


@accepts_math
@observed
def conv_bias_activation_pooling_forward(x, w, bias=None, *, pool_kernel, pool_stride=None, pool_padding=0,
                                         pool_mode="max", activation="relu", coef=None, z=None, alpha1=1.0,
                                         alpha2=0.0, stride=1, padding=0, dilation=1, groups=1, out=None,
                                         memory_limit=None, backend="auto", device=0):
    """pool(act(alpha1 * conv(x, w) + alpha2 * z + bias)) in one out-of-core pass.

    Replaces the composition
        y = conv_bias_activation_forward(x, w, bias, activation=, coef=, z=, alpha1=, alpha2=, stride=,
                                         padding=, dilation=, groups=)
        out = pool_forward(y, pool_kernel, stride=pool_stride, padding=pool_padding, mode=pool_mode)
    (itself conv_forward, add_tensor and activation_forward, then pooling) whose arguments it takes
    as they are (pool_* are pool_forward's kernel, stride, padding and mode): y never crosses the
    link, only x, w, z and the pooled result do. The chunks tile the pooled output; each computes
    the y rows its pooling windows need (so no window straddles two chunks: rows two tiles' windows
    share are computed twice, never moved). The result is a new array, or `out`."""
    x, w, bias = conv_inputs(x, w, bias)
    activation, coef = _activation_coef(activation, coef)
    o = _geometry(w.shape, stride, padding, dilation, groups, alpha1, alpha2, memory_limit, backend, device,
                  kernel=w.shape[2:])
    geometry = (o["stride"], o["padding"], o["dilation"], o["groups"])
    pool_mode = as_str(pool_mode, "pool_mode")
    pool = _pool_geometry(spatial_dims(w.shape), pool_kernel, pool_stride, pool_padding, pool_mode)
    out_shape = _native.pooled_shape(x.shape, w.shape, *geometry, *pool)
    y_shape = _native.conv_output_shape(x.shape, w.shape, *geometry)
    z = _z_input(z, y_shape, o["alpha2"], x)
    if out is None:
        out = new_result(out_shape, x.dtype)
    else:
        out = as_output(out, out_shape, {"x": x, "w": w, "bias": bias, "z": z}, x.dtype, device_arrays=True)
    read_z = z is not None and o["alpha2"] != 0.0
    _ready({"x": x, "w": w, "bias": bias, "z": z, "out": out}, o)
    _last_stats.record(_native.conv_bias_activation_pooling_forward(
        raw_bytes(x), x.shape, raw_bytes(w), w.shape, raw_bytes(z) if read_z else None, raw_bytes(bias),
        raw_bytes(out), activation, coef, *geometry, o["alpha1"], o["alpha2"] if read_z else 0.0, *pool, pool_mode,
        o["options"], str(x.dtype)))
    return caller_array(out)


@accepts_math
@accepts_machine
def plan_conv_bias_activation_pooling_forward(x_shape, w_shape, *, pool_kernel, pool_stride=None, pool_padding=0,
                                              bias=True, z=False, alpha1=1.0, alpha2=0.0, stride=1, padding=0,
                                              dilation=1, groups=1, dtype="float32", memory_limit=None,
                                              backend="auto", device=0, pinned=False):
    """The Plan conv_bias_activation_pooling_forward would run, without running it: its splits tile
    the pooled output ("h", "w", ... are the pooled dims); bytes_d2h is the pooled result once."""
    x_shape, w_shape, o = _plan_forward_args(x_shape, w_shape, dtype, z, stride, padding, dilation, groups, alpha1,
                                             alpha2, memory_limit, backend, device, pinned)
    pool = _pool_geometry(spatial_dims(w_shape), pool_kernel, pool_stride, pool_padding, "max")
    return _native.plan_conv_bias_activation_pooling_forward(
        x_shape, w_shape, o["stride"], o["padding"], o["dilation"], o["groups"], o["alpha1"],
        o["alpha2"] if z else 0.0, bool(bias), *pool, o["options"], o["dtype"])


@accepts_math
@observed
def deconv_bias_activation_forward(x, w, bias=None, *, activation="relu", coef=None, z=None, alpha1=1.0,
                                   alpha2=0.0, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                                   out=None, memory_limit=None, backend="auto", device=0):
    """y = act(alpha1 * conv_transpose(x, w) + alpha2 * z + bias) in one out-of-core pass: a
    transposed convolution (torch.nn.functional.conv_transpose1d/2d/3d; x [N, C_in, *spatial], w
    [C_in, C_out, *kernel], bias [C_out], output_padding < stride) with bias and activation.

    Replaces the composition
        y = conv_backward_data(x, w, y_shape, alpha=alpha1, stride=, padding=, dilation=, groups=)
            (the transposed convolution is the forward convolution's input gradient; y_shape has the
             output_padding rows added)
        y = add_tensor(z, y, alpha=alpha2, beta=1)            (when z is given)
        y = add_tensor(bias.reshape(1, C_out, 1, ...), y)      (when bias is given)
        y = activation_forward(y, activation, coef=coef)       (unless activation == "identity")
    whose arguments it takes as they are (activation, coef, z and alpha2 as conv_bias_activation_forward
    takes them): y crosses the link once. The result is a new array, or `out` (which may be z).
    Its plan is the backward-data plan of that composition's first step (its chunks: dx is y's
    rows, dy is x's)."""
    x = as_input(x, "x", CONV_DTYPES, device_arrays=True)
    w = same_dtype(as_input(w, "w", CONV_DTYPES, device_arrays=True), "w", x, "x")
    bias = None if bias is None else same_dtype(as_input(bias, "bias", CONV_DTYPES, device_arrays=True), "bias",
                                                x, "x")
    activation, coef = _activation_coef(activation, coef)
    o = _geometry(w.shape, stride, padding, dilation, groups, alpha1, alpha2, memory_limit, backend, device)
    output_padding = spatial_tuple(output_padding, spatial_dims(w.shape), "output_padding")
    geometry = (o["stride"], o["padding"], output_padding, o["dilation"], o["groups"])
    y_shape = _native.deconv_output_shape(x.shape, w.shape, *geometry)
    bias = bias_input(bias, y_shape[1], "output channel", CONV_DTYPES, device_arrays=True)
    z = _z_input(z, y_shape, o["alpha2"], x)
    out, read_z = _forward_output(out, y_shape, x, w, bias, z, o["alpha2"])
    _ready({"x": x, "w": w, "bias": bias, "z": z, "out": out}, o)
    _last_stats.record(_native.deconv_bias_activation_forward(
        raw_bytes(x), x.shape, raw_bytes(w), w.shape, raw_bytes(z) if read_z else None, raw_bytes(bias),
        raw_bytes(out), activation, coef, *geometry, o["alpha1"], o["alpha2"] if read_z else 0.0, o["options"],
        str(x.dtype)))
    return caller_array(out)


@accepts_math
@accepts_machine
def plan_deconv_bias_activation_forward(x_shape, w_shape, *, bias=True, z=False, alpha1=1.0, alpha2=0.0, stride=1,
                                        padding=0, output_padding=0, dilation=1, groups=1, dtype="float32",
                                        memory_limit=None, backend="auto", device=0, pinned=False):
    """The Plan deconv_bias_activation_forward would run, without running it (a backward-data plan
    with the bias resident: bytes_h2d counts x, w, z where read, and bias)."""
    x_shape, w_shape, o = _plan_forward_args(x_shape, w_shape, dtype, z, stride, padding, dilation, groups, alpha1,
                                             alpha2, memory_limit, backend, device, pinned, transposed=True)
    output_padding = spatial_tuple(output_padding, spatial_dims(w_shape), "output_padding")
    return _native.plan_deconv_bias_activation_forward(
        x_shape, w_shape, o["stride"], o["padding"], output_padding, o["dilation"], o["groups"], o["alpha1"],
        o["alpha2"] if z else 0.0, bool(bias), o["options"], o["dtype"])


def _backward_inputs(**arrays):
    """The fused backwards' arrays as zero-copy views of one dtype (float32, float16 or bfloat16:
    the first's), a tuple in the keywords' order; pre, the one optional array, may be None."""
    views, first = [], None
    for name, array in arrays.items():
        view = None if array is None and name == "pre" else as_input(array, name, CONV_DTYPES, device_arrays=True)
        if view is not None and first is not None:
            same_dtype(view, name, *first)
        first = first or (view, name)
        views.append(view)
    return tuple(views)


def _backward_outputs(out, x, dy, w, more_inputs=None):
    """(dx, dw, db): new arrays, or the caller's out=(dx, dw, db) checked (no overlap with the inputs
    or each other)."""
    shapes = (x.shape, w.shape, (w.shape[0],))
    if out is None:
        return tuple(new_result(s, x.dtype) for s in shapes)
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(f"out must be a tuple (dx, dw, db), got {type(out).__name__}")
    inputs = {"x": x, "dy": dy, "w": w, **(more_inputs or {})}
    checked = []
    for name, array, shape in zip(("dx", "dw", "db"), out, shapes):
        checked.append(as_output(array, shape, inputs, x.dtype, device_arrays=True))
        inputs[name] = checked[-1]
    return tuple(checked)


@accepts_math
@observed
def conv_backward_data_filter_bias(x, dy, w, *, stride=1, padding=0, dilation=1, groups=1, out=None,
                                   memory_limit=None, backend="auto", device=0):
    """(dx, dw, db), the three gradients of conv_forward(x, w, bias) for dy, from one out-of-core
    pass over dy.

    Replaces the composition
        dx = conv_backward_data(dy, w, x.shape, stride=, padding=, dilation=, groups=)
        dw = conv_backward_filter(x, dy, w.shape, stride=, padding=, dilation=, groups=)
        db = conv_backward_bias(dy)
    whose x, dy, w, stride, padding, dilation, groups and memory_limit it takes as they are: each dy
    tile crosses the link once and serves all three (the unfused sequence moves dy three times).
    dw and db stay on the device until the last tile; along a split spatial dimension the dx rows
    two tiles share are carried on the device (see native/src/plan/fused_planner.hpp). The results
    are new arrays, or out=(dx, dw, db)."""
    x, dy, w = _backward_inputs(x=x, dy=dy, w=w)
    o = _geometry(w.shape, stride, padding, dilation, groups, 1.0, 0.0, memory_limit, backend, device,
                  kernel=w.shape[2:])
    geometry = (o["stride"], o["padding"], o["dilation"], o["groups"])
    _native.check_conv_backward_data_filter_bias(x.shape, dy.shape, w.shape, *geometry)
    dx, dw, db = _backward_outputs(out, x, dy, w)
    _ready({"x": x, "dy": dy, "w": w, "dx": dx, "dw": dw, "db": db}, o)
    _last_stats.record(_native.conv_backward_data_filter_bias(
        raw_bytes(x), x.shape, raw_bytes(dy), dy.shape, raw_bytes(w), w.shape, raw_bytes(dx), raw_bytes(dw),
        raw_bytes(db), *geometry, o["options"], str(x.dtype)))
    return caller_array(dx), caller_array(dw), caller_array(db)


@accepts_math
@accepts_machine
def plan_conv_backward_data_filter_bias(x_shape, dy_shape, w_shape, *, stride=1, padding=0, dilation=1, groups=1,
                                        dtype="float32", memory_limit=None, backend="auto", device=0, pinned=False):
    """The Plan conv_backward_data_filter_bias would run, without running it: bytes_h2d counts dy
    once, bytes_d2h dx, dw and db once; kept_bytes and scratch_bytes the device memory dw, db and the
    carried dx rows take. pinned: plan for pinned arrays (as plan_conv_forward)."""
    shapes = as_shape(x_shape, "x_shape"), as_shape(dy_shape, "dy_shape"), as_shape(w_shape, "w_shape")
    dtype = check_dtype(dtype, CONV_DTYPES)
    o = _geometry(shapes[2], stride, padding, dilation, groups, 1.0, 0.0, memory_limit, backend, device,
                  pinned, shapes[2][2:])
    return _native.plan_conv_backward_data_filter_bias(*shapes, o["stride"], o["padding"], o["dilation"],
                                                       o["groups"], o["options"], dtype)


@accepts_math
@observed
def activation_conv_backward_data_filter_bias(x, dy, w, y, *, activation="relu", coef=None, pre=None, stride=1,
                                              padding=0, dilation=1, groups=1, out=None, memory_limit=None,
                                              backend="auto", device=0):
    """(dx, dw, db) of a convolution followed by an activation, y = act(pre) with pre = conv(x, w) +
    bias (conv_bias_activation_forward's y), from one out-of-core pass over dy.

    Replaces the composition
        dz = activation_backward(y, dy, pre, activation, coef=coef)
        dx, dw, db = conv_backward_data_filter_bias(x, dz, w, stride=, padding=, dilation=, groups=)
    (itself conv_backward_data, _filter and _bias of dz), whose arguments it takes as they are: dz
    is formed on the GPU from each dy tile and never crosses the link, so dy, y (and pre) cross once
    and dz not at all, against dy, y, pre in and dz out and in three times. pre, the activation's
    input, is needed unless the gradient follows from y alone, as for "relu", "sigmoid" and "tanh"
    (pre=None then moves one tensor less). "identity": dz = dy (y unused). The
    results are new arrays, or out=(dx, dw, db)."""
    x, dy, w, y, pre = _backward_inputs(x=x, dy=dy, w=w, y=y, pre=pre)
    activation, coef = _activation_coef(activation, coef)
    o = _geometry(w.shape, stride, padding, dilation, groups, 1.0, 0.0, memory_limit, backend, device,
                  kernel=w.shape[2:])
    geometry = (o["stride"], o["padding"], o["dilation"], o["groups"])
    _native.check_conv_backward_data_filter_bias(x.shape, dy.shape, w.shape, *geometry)
    inputs = {"y": y, "pre": pre}
    for name, a in inputs.items():
        if a is not None and a.shape != dy.shape:
            raise ValueError(f"{name} has shape {list(a.shape)}, expected {list(dy.shape)} (the shape of dy)")
    if pre is None and activation != "identity" and not _native.activation_traits(activation)[2]:
        raise ValueError(f"pre (the activation's input) is needed for the gradient of {activation}: y alone "
                         "does not give it")
    dx, dw, db = _backward_outputs(out, x, dy, w, inputs)
    y, pre = inputs["y"], inputs["pre"]
    _ready({"x": x, "dy": dy, "w": w, "y": y, "pre": pre, "dx": dx, "dw": dw, "db": db}, o)
    _last_stats.record(_native.activation_conv_backward_data_filter_bias(
        raw_bytes(x), x.shape, raw_bytes(dy), dy.shape, raw_bytes(w), w.shape, raw_bytes(y), raw_bytes(pre),
        raw_bytes(dx), raw_bytes(dw), raw_bytes(db), activation, coef, *geometry, o["options"], str(x.dtype)))
    return caller_array(dx), caller_array(dw), caller_array(db)


@accepts_math
@accepts_machine
def plan_activation_conv_backward_data_filter_bias(x_shape, dy_shape, w_shape, *, activation="relu", coef=None,
                                                   pre=False, stride=1, padding=0, dilation=1, groups=1,
                                                   dtype="float32", memory_limit=None, backend="auto", device=0,
                                                   pinned=False):
    """The Plan activation_conv_backward_data_filter_bias would run (pre: whether the call gets the
    activation's input), without running it: bytes_h2d counts dy, y (and pre) once each."""
    shapes = as_shape(x_shape, "x_shape"), as_shape(dy_shape, "dy_shape"), as_shape(w_shape, "w_shape")
    dtype = check_dtype(dtype, CONV_DTYPES)
    activation, coef = _activation_coef(activation, coef)
    o = _geometry(shapes[2], stride, padding, dilation, groups, 1.0, 0.0, memory_limit, backend, device,
                  pinned, shapes[2][2:])
    return _native.plan_activation_conv_backward_data_filter_bias(
        *shapes, activation, coef, bool(pre), o["stride"], o["padding"], o["dilation"], o["groups"], o["options"],
        dtype)


@accepts_math
@observed
def pooling_activation_conv_backward_data_filter_bias(x, dq, w, q, y, *, pool_kernel, pool_stride=None,
                                                      pool_padding=0, pool_mode="max", activation="relu", coef=None,
                                                      pre=None, stride=1, padding=0, dilation=1, groups=1, out=None,
                                                      memory_limit=None, backend="auto", device=0):
    """(dx, dw, db) through a pooling, an activation and a convolution: for q = pool(y), y =
    act(pre), pre = conv(x, w) + bias (conv_bias_activation_pooling_forward's chain), from one
    out-of-core pass over dq.

    Replaces the composition
        dy = pool_backward(q, dq, y, pool_kernel, stride=pool_stride, padding=pool_padding, mode=pool_mode)
        dz = activation_backward(y, dy, pre, activation, coef=coef)
        dx, dw, db = conv_backward_data_filter_bias(x, dz, w, stride=, padding=, dilation=, groups=)
    whose arguments it takes as they are (pre as activation_conv_backward_data_filter_bias takes it;
    "identity" skips the activation): dy and dz are formed on the GPU tile by tile and never cross
    the link. Each tile loads dq and q over the pooled rows whose windows reach it and y (and pre)
    over those windows; dims the pooling pads are never split. The results are new arrays, or
    out=(dx, dw, db)."""
    x, dq, w, q, y, pre = _backward_inputs(x=x, dq=dq, w=w, q=q, y=y, pre=pre)
    activation, coef = _activation_coef(activation, coef)
    o = _geometry(w.shape, stride, padding, dilation, groups, 1.0, 0.0, memory_limit, backend, device,
                  kernel=w.shape[2:])
    geometry = (o["stride"], o["padding"], o["dilation"], o["groups"])
    pool_mode = as_str(pool_mode, "pool_mode")
    pool = _pool_geometry(spatial_dims(w.shape), pool_kernel, pool_stride, pool_padding, pool_mode)
    y_shape = tuple(_native.conv_output_shape(x.shape, w.shape, *geometry))
    pooled = tuple(_native.pooled_shape(x.shape, w.shape, *geometry, *pool))
    inputs = {"q": q, "y": y, "pre": pre}
    for name, a, shape in (("dq", dq, pooled), ("q", inputs["q"], pooled), ("y", inputs["y"], y_shape),
                           ("pre", inputs["pre"], y_shape)):
        if a is not None and a.shape != shape:
            raise ValueError(f"{name} has shape {list(a.shape)}, expected {list(shape)}")
    if pre is None and activation != "identity" and not _native.activation_traits(activation)[2]:
        raise ValueError(f"pre (the activation's input) is needed for the gradient of {activation}: y alone "
                         "does not give it")
    dx, dw, db = _backward_outputs(out, x, dq, w, inputs)
    pre = inputs["pre"]
    _ready({"x": x, "dq": dq, "w": w, **inputs, "dx": dx, "dw": dw, "db": db}, o)
    _last_stats.record(_native.pooling_activation_conv_backward_data_filter_bias(
        raw_bytes(x), x.shape, raw_bytes(dq), raw_bytes(w), w.shape, raw_bytes(inputs["q"]), raw_bytes(inputs["y"]),
        y_shape, raw_bytes(pre), raw_bytes(dx), raw_bytes(dw), raw_bytes(db), activation, coef, *geometry, *pool,
        pool_mode, o["options"], str(x.dtype)))
    return caller_array(dx), caller_array(dw), caller_array(db)


@accepts_math
@accepts_machine
def plan_pooling_activation_conv_backward_data_filter_bias(x_shape, dy_shape, w_shape, *, pool_kernel,
                                                           pool_stride=None, pool_padding=0, activation="relu",
                                                           coef=None, pre=False, stride=1, padding=0, dilation=1,
                                                           groups=1, dtype="float32", memory_limit=None,
                                                           backend="auto", device=0, pinned=False):
    """The Plan pooling_activation_conv_backward_data_filter_bias would run (dy_shape: y's, the
    pooling's input), without running it: bytes_h2d counts dq and q over each tile's pooled rows and
    y (and pre) over their windows."""
    shapes = as_shape(x_shape, "x_shape"), as_shape(dy_shape, "dy_shape"), as_shape(w_shape, "w_shape")
    dtype = check_dtype(dtype, CONV_DTYPES)
    activation, coef = _activation_coef(activation, coef)
    o = _geometry(shapes[2], stride, padding, dilation, groups, 1.0, 0.0, memory_limit, backend, device,
                  pinned, shapes[2][2:])
    pool = _pool_geometry(spatial_dims(shapes[2]), pool_kernel, pool_stride, pool_padding, "max")
    return _native.plan_pooling_activation_conv_backward_data_filter_bias(
        *shapes, activation, coef, bool(pre), o["stride"], o["padding"], o["dilation"], o["groups"], *pool,
        o["options"], dtype)
