"""Memory layouts of N, C, *spatial arrays (docs/layouts.md): channels-first (C-contiguous, NCHW)
and channels-last (NHWC / NDHWC: C innermost, then the spatial dims, then N), which is what
`tensor.numpy()` of a torch tensor in memory_format=torch.channels_last(_3d) gives: logical shape
(N, C, H, W), channels-last strides. The convolutions take either, zero-copy, and give results in
x's layout; no array is ever copied to change its layout. This module is the one place strides are
read for layouts: which layouts an array's strides are, which layout a call runs in, how a result
is allocated in one and how a binding sees its bytes."""

import math

import numpy as np

CHANNELS_FIRST = "channels_first"
CHANNELS_LAST = "channels_last"
CONTIGUOUS_ONLY = (CHANNELS_FIRST,)
CONV_LAYOUTS = (CHANNELS_FIRST, CHANNELS_LAST)


def dense_order(ndim, layout):
    """The dimensions of an ndim-array from outermost to innermost in memory."""
    if layout == CHANNELS_LAST and ndim >= 3:
        return (0,) + tuple(range(2, ndim)) + (1,)
    return tuple(range(ndim))


def channel_rows(shape):
    """A channels-last array's memory as [N * space, C] rows, each position's channels contiguous:
    what a per-channel softmax or batch norm runs over with no copy."""
    return (math.prod(shape) // shape[1], shape[1])


def dense_strides(shape, itemsize, layout):
    """The byte strides of a dense array of logical `shape` in `layout`."""
    strides = [0] * len(shape)
    step = itemsize
    for d in reversed(dense_order(len(shape), layout)):
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def layouts_of(shape, strides, itemsize):
    """The layouts an array of `shape` and byte `strides` (None: C-contiguous) is dense in: both
    where they coincide (C == 1, or one position: a 1x1 image), none for other strides. Size-1
    dimensions' strides do not matter, as for numpy's flags."""
    if strides is None:
        strides = dense_strides(shape, itemsize, CHANNELS_FIRST)
    return tuple(layout for layout in CONV_LAYOUTS
                 if all(size == 1 or stride == expected
                        for size, stride, expected in zip(shape, strides, dense_strides(shape, itemsize, layout))))


def array_layouts(array):
    """layouts_of a host ndarray or a DeviceArray (pyooc/_device_arrays.py)."""
    return layouts_of(array.shape, getattr(array, "strides", None), array.dtype.itemsize)


def describe(layout):
    return "channels-last" if layout == CHANNELS_LAST else "channels-first (C-contiguous)"


def call_layout(arrays):
    """The layout one convolution runs in, from its arrays (name -> array or None, x's family first,
    as checked by as_input): the first array dense in only one layout decides (x's, unless x is
    dense in both, as when C == 1); all of them then must be dense in it, or a ValueError names the
    first that is not (one call takes one layout: a weight in another layout than x is refused, not
    copied; pyooc.torch converts its small weights itself, docs/layouts.md)."""
    given = {name: a for name, a in arrays.items() if a is not None and getattr(a, "ndim", 0) >= 3}
    layout, decided_by = CHANNELS_FIRST, None
    for name, array in given.items():
        layouts = array_layouts(array)
        if len(layouts) == 1:
            layout, decided_by = layouts[0], name
            break
    for name, array in given.items():
        if layout not in array_layouts(array):
            raise ValueError(f"{name} is {describe(_other(layout))} but {decided_by} is {describe(layout)}: one call "
                             f"takes one layout (convert {name}, e.g. torch's .contiguous(memory_format=...), "
                             "or pass both in one layout)")
    return layout


def _other(layout):
    return CHANNELS_FIRST if layout == CHANNELS_LAST else CHANNELS_LAST


def empty_in(shape, dtype, layout, allocate=np.empty):
    """An uninitialised array of logical `shape` in `layout`: `allocate` (np.empty, or the pinned
    result cache) makes its memory in dense order, viewed back in logical order."""
    order = dense_order(len(shape), layout)
    dense = allocate(tuple(shape[d] for d in order), dtype)
    return dense.transpose(np.argsort(order)) if order != tuple(range(len(shape))) else dense


def dense_view(array):
    """A host array's elements in memory order as a C-contiguous view (never a copy): the array
    itself when C-contiguous, else its channels-last dense order."""
    if array.flags.c_contiguous:
        return array
    dense = array.transpose(dense_order(array.ndim, CHANNELS_LAST))
    if not dense.flags.c_contiguous:  # as_input lets nothing else through
        raise AssertionError(f"pyooc: an array of strides {array.strides} reached a binding")
    return dense


def check_layout_name(layout):
    """The plan twins' layout= ("channels_first" or "channels_last")."""
    if layout not in CONV_LAYOUTS:
        raise ValueError(f"layout must be one of {CONV_LAYOUTS}, got {layout!r}")
    return layout
