"""Out-of-core batch normalization (torch.nn.functional.batch_norm's semantics, NC + spatial, per
channel). Arguments are checked here; libooc (native/include/ooc/layers.hpp) plans the tiles and
runs two passes where the statistics need them, with the GIL released. x, dy and the result are
float32, float16 or bfloat16 (one dtype a call); the per-channel arrays (scale, bias, statistics,
dscale, dbias) are float32 whatever x is, as cuDNN takes them for half x, and the statistics
accumulate in float32 or wider. Any array may be device-resident (__cuda_array_interface__): the
tensors are read and written in place, the per-channel ones copied to the host and back (libooc's
host step merges them). x may be channels-last (NHWC / NDHWC strides): its memory is [N * space, C]
rows, each position's channels contiguous, and batch norm over that 2-D view (per channel, over
every row) is the same computation, so libooc is handed that view and no copy is made; the result
has x's layout."""

import numpy as np

from pyooc import _last_stats
from pyooc._arrays import CONV_DTYPES, as_float, as_input, as_output, as_shape
from pyooc._call_args import call_options, check_dtype, raw_bytes, same_dtype
from pyooc._device_arrays import DeviceArray, caller_array, ready_device_arrays
from pyooc._layouts import CHANNELS_LAST, CONV_LAYOUTS, call_layout, channel_rows, empty_in
from pyooc._loader import load_native
from pyooc.progress import observed
from pyooc.machine import accepts_machine
from pyooc.pinned_cache import new_result

_native = load_native()


def _x(x, name="x"):
    x = as_input(x, name, CONV_DTYPES, device_arrays=True, layouts=CONV_LAYOUTS)
    if not 2 <= x.ndim <= 5:
        raise ValueError(f"{name} must have 2 to 5 dimensions (N, C, spatial...), got shape {list(x.shape)}")
    return x


def _per_channel(array, name, channels, writable=False):
    if array is None:
        raise TypeError(f"{name} must be an array, got None")
    if writable:
        if isinstance(array, np.ndarray):
            if array.dtype != np.float32 or not array.flags.c_contiguous or not array.flags.writeable:
                raise TypeError(f"{name} must be a writable C-contiguous float32 array (updated in place)")
        else:
            array = as_input(array, name, device_arrays=True)
            if not isinstance(array, DeviceArray) or array.readonly:
                raise TypeError(f"{name} must be a writable C-contiguous float32 array (updated in place)")
    else:
        array = as_input(array, name, device_arrays=True)
    if array.shape != (channels,):
        raise ValueError(f"{name} must have shape [{channels}] (one per channel), got {list(array.shape)}")
    return array


def _eps(eps):
    eps = as_float(eps, "eps")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    return eps


def _output(out, x, inputs, layout):
    if out is None:
        return empty_in(x.shape, x.dtype, layout, new_result)
    return as_output(out, x.shape, inputs, x.dtype, device_arrays=True, layout=layout)


def _run(operation, x, arrays, eps, momentum, options, layout):
    """Runs once every device array's producer is done; the binding takes each array as raw bytes,
    a channels-last x as its channel rows."""
    ready_device_arrays(arrays, options, _native)
    flat = {k: raw_bytes(v) for k, v in arrays.items()}
    shape = channel_rows(x.shape) if layout == CHANNELS_LAST else x.shape
    _last_stats.record(_native.batchnorm(operation, shape, flat, eps, momentum, options, str(x.dtype)))


@accepts_machine
def plan_batchnorm_forward_training(x_shape, *, dtype="float32", memory_limit=None, backend="auto", device=0):
    """The Plan batchnorm_forward_training would run: plan.passes is 2 (statistics, then normalize)."""
    return _plan("batchnorm_forward_training", x_shape, dtype, memory_limit, backend, device)


@accepts_machine
def plan_batchnorm_forward_inference(x_shape, *, dtype="float32", memory_limit=None, backend="auto", device=0):
    """The Plan batchnorm_forward_inference would run (one pass)."""
    return _plan("batchnorm_forward_inference", x_shape, dtype, memory_limit, backend, device)


@accepts_machine
def plan_batchnorm_backward(x_shape, *, dtype="float32", memory_limit=None, backend="auto", device=0):
    """The Plan batchnorm_backward would run: 2 passes (reduce sum(dy), sum(dy * xhat); then dx)."""
    return _plan("batchnorm_backward", x_shape, dtype, memory_limit, backend, device)


def _plan(operation, x_shape, dtype, memory_limit, backend, device):
    dtype = check_dtype(dtype, CONV_DTYPES)
    options = call_options(memory_limit, backend, device)
    return _native.plan_batchnorm(operation, as_shape(x_shape, "x_shape"), options, dtype)


@observed
def batchnorm_forward_training(x, scale, bias, *, eps=1e-5, momentum=0.1, running_mean=None, running_var=None,
                               out=None, memory_limit=None, backend="auto", device=0):
    """y = (x - mean) / sqrt(var + eps) * scale + bias with the batch's per-channel statistics over N
    and space (biased variance), out of core. Returns (y, saved_mean, saved_invstd).

    running_mean / running_var (float32 [C], both or neither) are updated in place like torch:
    r = (1 - momentum) * r + momentum * batch statistic, with the unbiased variance. Statistics are
    merged across chunks in float64 (Chan et al.), so they do not depend on the split."""
    x = _x(x)
    c = x.shape[1]
    scale, bias = _per_channel(scale, "scale", c), _per_channel(bias, "bias", c)
    eps, momentum = _eps(eps), as_float(momentum, "momentum")
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var go together: pass both or neither")
    if running_mean is not None:
        running_mean = _per_channel(running_mean, "running_mean", c, writable=True)
        running_var = _per_channel(running_var, "running_var", c, writable=True)
    if x.size // c <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(x.shape)}")
    options = call_options(memory_limit, backend, device)
    layout = call_layout({"x": x})
    out = _output(out, x, {"x": x, "scale": scale, "bias": bias}, layout)
    saved_mean, saved_invstd = np.empty(c, np.float32), np.empty(c, np.float32)
    _run("batchnorm_forward_training", x,
         {"x": x, "scale": scale, "bias": bias, "out": out, "out2": saved_mean, "out3": saved_invstd,
          "running_mean": running_mean, "running_var": running_var}, eps, momentum, options, layout)
    return caller_array(out), saved_mean, saved_invstd


@observed
def batchnorm_forward_inference(x, scale, bias, mean, var, *, eps=1e-5, out=None, memory_limit=None, backend="auto",
                                device=0):
    """y = (x - mean) / sqrt(var + eps) * scale + bias with given per-channel statistics, out of
    core, one pass."""
    x = _x(x)
    c = x.shape[1]
    arrays = {name: _per_channel(a, name, c) for name, a in
              (("scale", scale), ("bias", bias), ("mean", mean), ("var", var))}
    eps = _eps(eps)
    options = call_options(memory_limit, backend, device)
    layout = call_layout({"x": x})
    out = _output(out, x, dict(arrays, x=x), layout)
    _run("batchnorm_forward_inference", x, dict(arrays, x=x, out=out), eps, 0.0, options, layout)
    return caller_array(out)


@observed
def batchnorm_backward(x, dy, scale, saved_mean, saved_invstd, *, eps=1e-5, out=None, memory_limit=None,
                       backend="auto", device=0):
    """Gradients of batchnorm_forward_training: (dx, dscale, dbias), out of core in two passes
    (sum(dy) and sum(dy * xhat) per channel, then dx). saved_mean / saved_invstd are the forward's;
    eps is checked for symmetry with the forward (saved_invstd already includes it)."""
    x = _x(x)
    dy = same_dtype(_x(dy, "dy"), "dy", x, "x")
    if dy.shape != x.shape:
        raise ValueError(f"dy must have x's shape {list(x.shape)}, got {list(dy.shape)}")
    c = x.shape[1]
    scale = _per_channel(scale, "scale", c)
    saved_mean = _per_channel(saved_mean, "saved_mean", c)
    saved_invstd = _per_channel(saved_invstd, "saved_invstd", c)
    _eps(eps)
    options = call_options(memory_limit, backend, device)
    layout = call_layout({"x": x, "dy": dy})
    out = _output(out, x, {"x": x, "dy": dy, "scale": scale}, layout)
    dscale, dbias = np.empty(c, np.float32), np.empty(c, np.float32)
    _run("batchnorm_backward", x,
         {"x": x, "dy": dy, "scale": scale, "mean": saved_mean, "var": saved_invstd, "out": out, "out2": dscale,
          "out3": dbias}, 1e-5, 0.0, options, layout)
    return caller_array(out), dscale, dbias


__all__ = ["batchnorm_forward_training", "batchnorm_forward_inference", "batchnorm_backward",
           "plan_batchnorm_forward_training", "plan_batchnorm_forward_inference", "plan_batchnorm_backward"]
