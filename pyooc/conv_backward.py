"""The convolution's gradients out of core (cuDNN's BackwardData, BackwardFilter, BackwardBias) over
host arrays. Arguments are checked with the shared checks (pyooc/_call_args.py); libooc validates
the geometry (dy must be the forward output of x and w), plans the split and runs it with the GIL
released."""

from pyooc import _last_stats
import numpy as np

from pyooc._arrays import CONV_DTYPES, as_shape
from pyooc._call_args import check_dtype, conv_args, conv_input, output_array, raw_bytes, same_dtype, spatial_dims
from pyooc._layouts import CONV_LAYOUTS, call_layout, check_layout_name, empty_in
from pyooc._device_arrays import DeviceArray, caller_array, is_device_array, ready_device_arrays
from pyooc._loader import load_native
from pyooc._padding_fold import fold_padding, padding_pairs
from pyooc.progress import observed
from pyooc.machine import accepts_machine
from pyooc.precision import accepts_math

_native = load_native()


def _run(operation, inputs, third_shape, out_shape, formula, out, o):
    """Validates, makes or checks out, runs. inputs: the two arrays in the native order (name ->
    array; the second None for bias); third_shape: x_shape, w_shape or () for bias."""
    (a_name, a), (b_name, b) = inputs.items()
    if b is not None:
        same_dtype(b, b_name, a, a_name)
    b_shape = () if b is None else b.shape
    # Validates the geometry (ValueError naming the argument) before anything is allocated.
    _native.check_backward(operation, a.shape, b_shape, third_shape, o["stride"], o["padding"], o["dilation"],
                           o["groups"], o["padding_mode"])
    given = {name: array for name, array in inputs.items() if array is not None}
    layout = call_layout(given)  # the result has the inputs' layout (pyooc/_layouts.py)
    out = output_array(out, out_shape(), given, o["beta"], formula, a.dtype, device_arrays=True, layout=layout)
    ready_device_arrays({**given, "out": out}, o["options"], _native)
    _last_stats.record(_native.conv_backward(
        operation, raw_bytes(a), a.shape, raw_bytes(b), b_shape, third_shape, raw_bytes(out), o["stride"],
        o["padding"], o["dilation"], o["groups"], o["alpha"], o["beta"], o["options"], str(a.dtype),
        o["padding_mode"], layout))
    return caller_array(out)


def _padded_input(dy_shape, w_shape, x_shape, o):
    """For backward data under a non-zero padding_mode: the padded input's shape, the padding as
    (before, after) pairs, and the options of the unpadded problem on that shape. Validates first,
    naming the caller's shapes: dy against x_shape with the call's own padding, then the padding
    against x_shape in torch's words (reflect pads less than a dimension's size, circular at most
    its size)."""
    _native.check_backward("conv_backward_data", dy_shape, w_shape, x_shape, o["stride"], o["padding"],
                           o["dilation"], o["groups"])
    _native.conv_output_shape(x_shape, w_shape, o["stride"], o["padding"], o["dilation"], o["groups"],
                              o["padding_mode"])
    pairs = padding_pairs(o["padding"], len(x_shape) - 2)
    padded = tuple(x_shape[:2]) + tuple(n + b + a for n, (b, a) in zip(x_shape[2:], pairs))
    return padded, pairs, dict(o, padding=(0,) * len(pairs), beta=0.0, padding_mode="zeros")


def _backward_data_folded(inputs, x_shape, formula, out, o):
    """conv_backward_data under a non-zero padding_mode: torch convolves F.pad(x, pads, mode) with
    padding 0, so dx = F.pad's adjoint of the padded input's gradient. That gradient (alpha
    applied) comes from the ordinary out-of-core path, the unpadded problem on the padded shape,
    into a host temporary of the padded x's shape and the call's dtype (N * C * prod(in + before +
    after) elements); its margins are folded onto the elements they copied in float32
    (_padding_fold.fold_padding, working arrays no larger than the temporary), then beta * out is
    added and the sum rounded once to out's dtype."""
    named = {**inputs, "out": out}
    for name, array in named.items():
        if isinstance(array, DeviceArray) or is_device_array(array):
            raise ValueError(f"conv_backward_data: padding_mode={o['padding_mode']!r} needs {name} in host memory "
                             "(the padded input's gradient is folded on the host)")
    dy, w = inputs["dy"], inputs["w"]
    padded_shape, pairs, unpadded = _padded_input(dy.shape, w.shape, x_shape, o)
    layout = call_layout(inputs)  # the temporary and the result in the inputs' layout, as _run's
    out = output_array(out, x_shape, inputs, o["beta"], formula, dy.dtype, layout=layout)
    grad = empty_in(padded_shape, dy.dtype, layout)
    _run("conv_backward_data", inputs, padded_shape, lambda: padded_shape, formula, grad, unpadded)
    folded = fold_padding(grad, pairs, o["padding_mode"])
    if o["beta"] != 0.0:  # beta == 0 never reads out (NaN there stays out of the result)
        folded += np.float32(o["beta"]) * out.astype(np.float32)
    out[...] = folded
    return out


def _plan(operation, shapes, w_shape, dtype, stride, padding, dilation, groups, alpha, beta, memory_limit, backend,
          device, pinned, layout, padding_mode="zeros"):
    dtype = check_dtype(dtype, CONV_DTYPES)
    layout = check_layout_name(layout)
    o = conv_args(spatial_dims(w_shape), stride, padding, dilation, groups, alpha, beta, memory_limit, backend, device,
                  pinned, kernel=w_shape[2:], padding_mode=padding_mode)
    if operation == "conv_backward_data" and o["padding_mode"] != "zeros":  # what conv_backward_data runs
        dy_shape, w_shape, x_shape = shapes
        padded_shape, _, o = _padded_input(dy_shape, w_shape, x_shape, o)
        shapes = dy_shape, w_shape, padded_shape
    return _native.plan_conv_backward(operation, *shapes, o["stride"], o["padding"], o["dilation"], o["groups"],
                                      o["alpha"], o["beta"], o["options"], dtype, o["padding_mode"], layout)


@accepts_math
@accepts_machine
def plan_conv_backward_data(dy_shape, w_shape, x_shape, *, stride=1, padding=0, dilation=1, groups=1, alpha=1.0,
                            beta=0.0, dtype="float32", memory_limit=None, backend="auto", device=0,
                            pinned=False, padding_mode="zeros", layout="channels_first"):
    """The Plan conv_backward_data would run for these shapes and options, without running it.
    Raises MemoryError, saying how much the smallest plan needs, when nothing fits memory_limit.
    pinned: plan for pinned arrays (as plan_conv_forward). A non-zero padding_mode plans the
    unpadded problem on the padded x, the one conv_backward_data runs before it folds."""
    shapes = as_shape(dy_shape, "dy_shape"), as_shape(w_shape, "w_shape"), as_shape(x_shape, "x_shape")
    return _plan("conv_backward_data", shapes, shapes[1], dtype, stride, padding, dilation, groups, alpha, beta,
                 memory_limit, backend, device, pinned, layout, padding_mode)


@accepts_math
@accepts_machine
def plan_conv_backward_filter(x_shape, dy_shape, w_shape, *, stride=1, padding=0, dilation=1, groups=1, alpha=1.0,
                              beta=0.0, dtype="float32", memory_limit=None, backend="auto", device=0,
                              pinned=False, padding_mode="zeros", layout="channels_first"):
    """The Plan conv_backward_filter would run for these shapes and options, without running it."""
    shapes = as_shape(x_shape, "x_shape"), as_shape(dy_shape, "dy_shape"), as_shape(w_shape, "w_shape")
    return _plan("conv_backward_filter", shapes, shapes[2], dtype, stride, padding, dilation, groups, alpha, beta,
                 memory_limit, backend, device, pinned, layout, padding_mode)


@accepts_machine
def plan_conv_backward_bias(dy_shape, *, alpha=1.0, beta=0.0, dtype="float32", memory_limit=None, backend="auto",
                            device=0, pinned=False, layout="channels_first"):
    """The Plan conv_backward_bias would run for this shape and options, without running it."""
    shapes = as_shape(dy_shape, "dy_shape"), (), ()
    return _plan("conv_backward_bias", shapes, (1, 1, 1), dtype, 1, 0, 1, 1, alpha, beta, memory_limit, backend,
                 device, pinned, layout)


@accepts_math
@observed
def conv_backward_data(dy, w, x_shape, *, stride=1, padding=0, dilation=1, groups=1, alpha=1.0, beta=0.0, out=None,
                       memory_limit=None, backend="auto", device=0, devices=None, padding_mode="zeros"):
    """dx = alpha * conv_transpose(dy, w) + beta * out: the gradient of conv_forward with respect to
    its input x (cuDNN's ConvolutionBackwardData, torch.nn.grad.conv{1,2,3}d_input), computed out of
    core. dy must have the shape conv_forward gives for x_shape and w with these options. Arrays and
    options as for conv_forward (C-contiguous or channels-last, dy and w alike); the result is a new
    array of x_shape in dy's layout, or `out` (which beta scales). A non-zero padding_mode (host
    arrays only) computes the padded input's gradient into a host temporary of the padded x's shape
    and folds its margins back, as F.pad's backward does."""
    inputs = {"dy": conv_input(dy, "dy", CONV_LAYOUTS), "w": conv_input(w, "w", CONV_LAYOUTS)}
    x_shape = as_shape(x_shape, "x_shape")
    o = conv_args(spatial_dims(inputs["w"].shape), stride, padding, dilation, groups, alpha, beta, memory_limit,
                  backend, device, kernel=inputs["w"].shape[2:], devices=devices, padding_mode=padding_mode)
    formula = "dx = alpha * conv_transpose(dy, w) + beta * out"
    if o["padding_mode"] != "zeros":
        return _backward_data_folded(inputs, x_shape, formula, out, o)
    return _run("conv_backward_data", inputs, x_shape, lambda: x_shape, formula, out, o)


@accepts_math
@observed
def conv_backward_filter(x, dy, w_shape, *, stride=1, padding=0, dilation=1, groups=1, alpha=1.0, beta=0.0, out=None,
                         memory_limit=None, backend="auto", device=0, devices=None, padding_mode="zeros"):
    """dw = alpha * (gradient of conv_forward with respect to w, for dy) + beta * out (cuDNN's
    ConvolutionBackwardFilter, torch.nn.grad.conv{1,2,3}d_weight), computed out of core: the sum over
    samples and positions accumulates on the device in fp32. dy must have the shape conv_forward
    gives for x and w_shape; the result is a new array of w_shape, or `out` (which beta scales once).
    padding_mode: as conv_forward's (x's halo gathered on the host as the forward's; x in host memory)."""
    inputs = {"x": conv_input(x, "x", CONV_LAYOUTS), "dy": conv_input(dy, "dy", CONV_LAYOUTS)}
    w_shape = as_shape(w_shape, "w_shape")
    o = conv_args(spatial_dims(w_shape), stride, padding, dilation, groups, alpha, beta, memory_limit, backend, device,
                  kernel=w_shape[2:], devices=devices, padding_mode=padding_mode)
    return _run("conv_backward_filter", inputs, w_shape, lambda: w_shape, "dw = alpha * dconv(x, dy) + beta * out",
                out, o)


@observed
def conv_backward_bias(dy, *, alpha=1.0, beta=0.0, out=None, memory_limit=None, backend="auto", device=0,
                       devices=None):
    """db = alpha * dy summed over samples and positions + beta * out (cuDNN's
    ConvolutionBackwardBias), computed out of core; dy is [N, K, *spatial], db has K elements."""
    inputs = {"dy": conv_input(dy, "dy", CONV_LAYOUTS), "": None}
    o = conv_args(1, 1, 0, 1, 1, alpha, beta, memory_limit, backend, device, devices=devices)
    return _run("conv_backward_bias", inputs, (), lambda: inputs["dy"].shape[1:2], "db = alpha * sum(dy) + beta * out",
                out, o)
