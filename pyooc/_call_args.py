"""The argument checks and call options the operations share.

Each public function (conv.py, layers.py, fused.py, ...) checks its arguments with these and with
_arrays.py's, then hands its binding (pyooc/_native.pyx) one CallOptions, built by call_options or
conv_args: memory_limit, backend, device and pinned as libooc's Options (native/include/ooc/ooc.hpp).
Checked here is only what needs Python objects: types, "512MiB"-style limits, backend names, bias
and out= arrays; shapes and geometry are validated once, in libooc, and arrive as ValueError naming
the argument."""

import numpy as np

from pyooc._device_arrays import DeviceArray
from pyooc._arrays import CONV_DTYPES, FLOAT32, as_float, as_input, as_int, as_output, dtype_names, spatial_tuple
from pyooc._layouts import CHANNELS_FIRST, CONTIGUOUS_ONLY, dense_view, empty_in
from pyooc._loader import load_native
from pyooc.devices import call_devices
from pyooc.machine import planning_machine
from pyooc.memory import parse_memory_limit
from pyooc.progress import call_observer
from pyooc.pinned_cache import new_result
from pyooc.precision import call_math

_native = load_native()
BACKENDS = ("auto", "cuda", "host")


def check_backend(backend):
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def call_options(memory_limit, backend, device, pinned=False, devices=None):
    """The CallOptions of one call from its public arguments: memory_limit (bytes or "512MiB";
    None: the process default), backend, device; pinned (plan_* only): plan as if every array
    were pinned; devices: the devices it spreads over (pyooc/devices.py; None: the process
    default). Its observer (Ctrl-C, the call's progress= and cancel=: pyooc/progress.py) comes
    from the call's context, so that no function passes them; so does its math mode (the call's
    math=, else the process default: pyooc/precision.py)."""
    check_backend(backend)
    # machine: the model a plan_* call was given (pyooc/machine.py's accepts_machine), else None.
    return _native.CallOptions(parse_memory_limit(memory_limit) or 0, backend, as_device(device), bool(pinned),
                               call_observer(), planning_machine(), call_devices(devices), call_math())


def as_device(device):
    """A CUDA device ordinal as the binding's int takes it (libooc says which are present)."""
    return as_int(device, "device", -2**31, 2**31 - 1)


PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def check_padding_mode(padding_mode):
    """padding_mode as torch's convolution modules take it (ValueError in torch's words otherwise)."""
    if not isinstance(padding_mode, str) or padding_mode not in PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {list(PADDING_MODES)}, but got padding_mode={padding_mode!r}")
    return padding_mode


def conv_args(spatial, stride, padding, dilation, groups, alpha, beta, memory_limit, backend, device,
              pinned=False, kernel=None, devices=None, padding_mode="zeros"):
    """A convolution-shaped call's scalars checked, as a dict: stride, padding (conv_padding's),
    dilation (tuples of `spatial` ints), groups, alpha, beta, padding_mode, and "options" (a
    CallOptions). kernel: w's spatial sizes, for padding strings (None: the call takes none, e.g. a
    transposed convolution, whose padding torch gives no strings either)."""
    check_backend(backend)  # first: a bad backend is reported before a bad geometry, as it always was
    stride = spatial_tuple(stride, spatial, "stride")
    dilation = spatial_tuple(dilation, spatial, "dilation")
    return dict(
        stride=stride,
        padding_mode=check_padding_mode(padding_mode),
        padding=conv_padding(padding, spatial, kernel, stride, dilation),
        dilation=dilation,
        groups=as_int(groups, "groups"),
        alpha=as_float(alpha, "alpha"),
        beta=as_float(beta, "beta"),
        options=call_options(memory_limit, backend, device, pinned, devices),
    )


def conv_padding(padding, spatial, kernel, stride, dilation):
    """padding as the bindings take it: a tuple of ints (each dimension padded alike at both ends),
    or a tuple of (before, after) pairs. torch's strings: "valid" pads nothing; "same" (stride 1
    only) pads dilation * (kernel - 1) in all, total // 2 before and the rest after, as torch does,
    so an even dilated kernel pads one more after than before (the chunks then pad that dimension
    with explicit zeros rather than through cuDNN, whose padding is symmetric)."""
    if not isinstance(padding, str):
        if isinstance(padding, (tuple, list)) and any(isinstance(p, (tuple, list)) for p in padding):
            return _padding_pairs(padding, spatial)
        return spatial_tuple(padding, spatial, "padding")
    if kernel is None:
        raise ValueError(f"padding={padding!r} is not supported here: padding strings apply to convolutions "
                         "(torch's conv_transpose takes none either)")
    if padding == "valid":
        return (0,) * spatial
    if padding != "same":
        raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    stride = stride * spatial if len(stride) == 1 else stride
    dilation = dilation * spatial if len(dilation) == 1 else dilation
    if any(s != 1 for s in stride):
        raise ValueError("padding='same' is not supported for strided convolutions")
    totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
    if all(t % 2 == 0 for t in totals):
        return tuple(t // 2 for t in totals)
    return tuple((t // 2, t - t // 2) for t in totals)


def _padding_pairs(padding, spatial):
    """A tuple of `spatial` entries, each an int (both ends) or a (before, after) pair of ints."""
    if len(padding) != spatial:
        raise ValueError(f"padding must have {spatial} entries when it gives (before, after) pairs, got {list(padding)}")
    pairs = []
    for p in padding:
        if isinstance(p, (tuple, list)):
            if len(p) != 2:
                raise ValueError(f"padding: each entry is an int or a (before, after) pair, got {list(p)}")
            pairs.append((as_int(p[0], "padding"), as_int(p[1], "padding")))
        else:
            v = as_int(p, "padding")
            pairs.append((v, v))
    return tuple(pairs)


def spatial_dims(shape):
    """How many spatial dims an [N or K, C, *spatial] shape has, clamped to 1..3: rank errors are
    reported by libooc, naming the tensor; here only pick a count the tuples parse with."""
    return min(max(len(shape) - 2, 1), 3)


def check_dtype(dtype, allowed=FLOAT32):
    """The plan twins' dtype= (a numpy dtype or its name; "bfloat16" is ml_dtypes') as its name."""
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        if str(dtype) != "bfloat16":
            raise TypeError(f"dtype must be {dtype_names(allowed)}, got {dtype!r}") from None
        resolved = CONV_DTYPES[2]
    if resolved not in allowed:
        more = "" if allowed != FLOAT32 else " (other dtypes are planned)"
        raise TypeError(f"dtype must be {dtype_names(allowed)}{more}, got {resolved}")
    return str(resolved)


def raw_bytes(array):
    """The bytes of a C-contiguous or channels-last array in memory order, flat, as the bindings of
    every dtype take them (no copy); a DeviceArray as it is (the bindings take its device address)."""
    if array is None or isinstance(array, DeviceArray):
        return array
    return dense_view(array).reshape(-1).view(np.uint8)


def conv_input(array, name, layouts=CONTIGUOUS_ONLY, device_arrays=True):
    """One of a convolution's tensors as a zero-copy view: float32, float16 or bfloat16, on the host
    or (device_arrays) the device, dense in one of `layouts` (the convolutions pass CONV_LAYOUTS,
    channels-last too: pyooc/_layouts.py; the fused forms, whose bindings flatten C-contiguous host
    arrays, do not)."""
    return as_input(array, name, CONV_DTYPES, device_arrays=device_arrays, layouts=layouts)


def conv_inputs(x, w, bias, layouts=CONTIGUOUS_ONLY, device_arrays=True):
    """x, w and bias (or None) as zero-copy views of one dtype (float32, float16 or bfloat16), bias
    checked against w's output channels; device-resident ones as DeviceArrays (the convolutions
    read them in place), or refused naming the argument where not device_arrays; x and w dense in
    one of `layouts` (conv_input's)."""
    x = conv_input(x, "x", layouts, device_arrays)
    w = same_dtype(conv_input(w, "w", layouts, device_arrays), "w", x, "x")
    # A w without dimensions is refused by libooc, naming its rank; its bias is checked for rank alone.
    bias = bias_input(bias, w.shape[0] if w.ndim else None, "output channel", CONV_DTYPES, device_arrays)
    return x, w, None if bias is None else same_dtype(bias, "bias", x, "x")


def same_dtype(array, name, first, first_name):
    """array, when it has first's dtype: one call computes in one dtype (as torch's convolutions)."""
    if array.dtype != first.dtype:
        raise TypeError(f"{name} must have the dtype of {first_name} ({first.dtype}), got {array.dtype}: "
                        "mixed dtypes in one call are not supported")
    return array


def bias_input(bias, count, per, dtypes=FLOAT32, device_arrays=False):
    """bias (or None) as a zero-copy view of `count` elements (None: any), one per `per` ("output
    channel", ...); device_arrays: as for as_input."""
    if bias is None:
        return None
    bias = as_input(bias, "bias", dtypes, device_arrays)
    if bias.ndim != 1 or (count is not None and bias.shape[0] != count):
        raise ValueError(f"bias must have shape [{count}] (one per {per}), got {list(bias.shape)}")
    return bias


def output_array(out, shape, inputs, beta, formula, dtype=np.float32, device_arrays=False, layout=CHANNELS_FIRST):
    """The array a scaled op writes: a new one of `dtype` (the inputs') in `layout` (the call's),
    or the caller's out checked against the inputs; beta != 0 scales out, so it needs one (formula:
    the op's, for the error). A new one is a host array even when the inputs are on the device
    (pyooc's results are the tensors that do not fit there); device_arrays: out may be
    device-resident."""
    if out is None:
        if beta != 0.0:
            raise ValueError(f"beta != 0 needs out= ({formula})")
        return empty_in(shape, dtype, layout, new_result)
    return as_output(out, shape, inputs, dtype, device_arrays, layout)
