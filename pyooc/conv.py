"""Out-of-core convolution over host arrays. Each function checks its Python arguments here and
hands flat zero-copy views to libooc (native/include/ooc/ooc.hpp), which validates the geometry,
plans the split and runs it with the GIL released."""

from pyooc import _last_stats
from pyooc._arrays import CONV_DTYPES, as_shape
from pyooc._call_args import check_dtype, conv_args, conv_inputs, output_array, raw_bytes, spatial_dims
from pyooc._layouts import CHANNELS_FIRST, CONV_LAYOUTS, array_layouts, call_layout, check_layout_name
from pyooc._device_arrays import caller_array, device_array, is_device_array, ready_device_arrays
from pyooc._loader import load_native
from pyooc.progress import observed
from pyooc._unbatched import as_batch_of_one, without_batch
from pyooc.machine import accepts_machine
from pyooc.precision import accepts_math

_native = load_native()


@accepts_math
@accepts_machine
def plan_conv_forward(x_shape, w_shape, *, bias=False, stride=1, padding=0, dilation=1, groups=1, alpha=1.0,
                      beta=0.0, dtype="float32", memory_limit=None, backend="auto", device=0, pinned=False,
                      padding_mode="zeros", layout="channels_first"):
    """The Plan conv_forward would run for these shapes and options, without running it.

    bias: whether a bias is added (its K floats stay on the device). Raises MemoryError, saying how
    much the smallest plan needs, when nothing fits memory_limit. pinned: plan for pinned arrays
    (DMA only; conv_forward does so when every array it gets is pinned) rather than pageable ones
    (gathered and scattered by host workers, a cost that favours other splits). layout:
    "channels_first" or "channels_last", the arrays' (docs/layouts.md)."""
    layout = check_layout_name(layout)
    x_shape = as_shape(x_shape, "x_shape")
    w_shape = as_shape(w_shape, "w_shape")
    if len(x_shape) == len(w_shape) - 1:  # unbatched, as conv_forward takes it: planned as a batch of one
        x_shape = (1,) + x_shape
    dtype = check_dtype(dtype, CONV_DTYPES)
    o = conv_args(spatial_dims(w_shape), stride, padding, dilation, groups, alpha, beta, memory_limit, backend,
                  device, pinned, kernel=w_shape[2:], padding_mode=padding_mode)
    return _native.plan_conv_forward(x_shape, w_shape, o["stride"], o["padding"], o["dilation"], o["groups"],
                                     o["alpha"], o["beta"], bool(bias), o["options"], dtype, o["padding_mode"],
                                     layout)


@accepts_math
@observed
def conv_forward(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, alpha=1.0, beta=0.0, out=None,
                 memory_limit=None, backend="auto", device=0, devices=None, padding_mode="zeros"):
    """y = alpha * conv(x, w) + beta * out + bias, computed out of core.

    Like torch.nn.functional.conv1d/2d/3d (cross-correlation; x [N, C, *spatial], w [K, C/groups,
    *kernel], bias [K], positional as torch's; x may be unbatched, [C, *spatial], as torch's), plus
    cuDNN's alpha/beta and a device-memory budget. padding: an int, one per spatial dimension, a
    (before, after) pair per dimension, or torch's "valid" / "same" (stride 1; an even dilated kernel
    pads one more after than before, as torch). groups: grouped and depthwise convolution (w [K,
    C/groups, *kernel]; K divisible by groups). x, w and bias go in
    zero-copy (float32, float16 or bfloat16; C-contiguous or channels-last, x and w alike: an array
    of logical shape [N, C, *spatial] with NHWC strides, as torch's channels_last tensors give; any
    buffer-protocol array: numpy, memory-mapped, pinned) and are never written; the result has x's
    layout. The result is a new array, or `out` (which beta then scales; beta != 0 needs
    out). memory_limit caps device bytes for this call (int or "512MiB"; default: set_memory_limit()).
    backend: "auto" (GPU when present), "cuda" or "host" (CPU reference, same chunking). devices:
    spread the chunks over several GPUs ("all" or a list of ordinals; None: pyooc.set_devices'
    default, else `device` alone; pyooc/devices.py). padding_mode: what the padding holds, as torch's
    Conv modules: "zeros", "reflect", "replicate" or "circular" (torch's F.pad(x, ..., mode) then an
    unpadded convolution), computed exactly by the host gather of each chunk's halo
    (docs/ARCHITECTURE.md); x must then be in host memory."""
    x, w, bias = conv_inputs(x, w, bias, CONV_LAYOUTS)
    unbatched = x.ndim == w.ndim - 1  # torch's unbatched (C, *spatial): pyooc/_unbatched.py
    if unbatched and CHANNELS_FIRST not in array_layouts(x):  # torch has no channels-last of it either
        raise ValueError("x must be C-contiguous when unbatched ([C, *spatial]); channels-last needs a batch dimension")
    if is_device_array(out):  # as a DeviceArray before it is given a batch dimension
        out = device_array(out, "out", CONV_DTYPES, writable=True)
    x, out = as_batch_of_one(x, unbatched, out)
    layout = call_layout({"x": x, "w": w})  # the result has x's layout (pyooc/_layouts.py)
    o = conv_args(spatial_dims(w.shape), stride, padding, dilation, groups, alpha, beta, memory_limit, backend, device,
                  kernel=w.shape[2:], devices=devices, padding_mode=padding_mode)
    # Validates the geometry (ValueError naming the argument) before anything is allocated.
    y_shape = _native.conv_output_shape(x.shape, w.shape, o["stride"], o["padding"], o["dilation"], o["groups"],
                                        o["padding_mode"])
    out = output_array(out, y_shape, {"x": x, "w": w, "bias": bias}, o["beta"], "y = alpha * conv(x, w) + beta * out",
                       x.dtype, device_arrays=True, layout=layout)
    ready_device_arrays({"x": x, "w": w, "bias": bias, "out": out}, o["options"], _native)
    _last_stats.record(_native.conv_forward(
        raw_bytes(x), x.shape, raw_bytes(w), w.shape, raw_bytes(bias), raw_bytes(out), o["stride"], o["padding"],
        o["dilation"], o["groups"], o["alpha"], o["beta"], o["options"], str(x.dtype), o["padding_mode"], layout))
    return caller_array(without_batch(out, unbatched))
