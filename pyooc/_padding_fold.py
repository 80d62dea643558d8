"""The gradient of a convolution's padding_mode with respect to x: torch pads x with F.pad(x, pads,
mode) and convolves the padded input with padding 0, so dx is F.pad's adjoint applied to the
gradient of the padded input, every padded element's gradient added onto the element it copied.
The forward's copy is native (exec/region_copy.cpp's border_source); this is its transpose, on the
host, for conv_backward_data."""

import numpy as np


def padded_source(i, size, mode):
    """The index in [0, size) whose element the padded tensor holds at index i (i < 0: before the
    start, i >= size: after the end), torch's F.pad rules as border_source has them: reflect mirrors
    without repeating the edge, replicate repeats it, circular wraps. Each border reaches at most one
    period (the padding was validated against the input first)."""
    if 0 <= i < size:
        return i
    if mode == "reflect":
        return -i if i < 0 else 2 * (size - 1) - i
    if mode == "replicate":
        return 0 if i < 0 else size - 1
    if mode == "circular":
        return i + size if i < 0 else i - size
    raise ValueError(f"padded_source: padding_mode {mode!r} copies nothing")


def padding_pairs(padding, spatial):
    """conv_args' padding (ints, or (before, after) pairs; one int stands for every dimension, as
    libooc reads it) as one (before, after) pair for each of `spatial` dimensions."""
    pairs = tuple((p, p) if isinstance(p, int) else tuple(p) for p in padding)
    return pairs * spatial if len(pairs) == 1 else pairs


def fold_padding(grad, pairs, mode, dtype=np.float32):
    """F.pad(x, pads, mode)'s adjoint: grad has the padded shape ([N, C, *padded]); the result, of
    `dtype` (the accumulation type: float32 for every convolution dtype), has x's. One dimension
    at a time (the padding is separable and each dimension's fold touches only its own axis): the
    interior, plus each padded row added onto the row it was copied from, in the order of the
    padded rows. Working memory: one array of the result's dtype a dimension, each no larger than
    grad."""
    g = grad
    for axis, (before, after) in enumerate(pairs, start=2):
        size = g.shape[axis] - before - after
        moved = np.moveaxis(g, axis, 0)
        folded = moved[before:before + size].astype(dtype, copy=True)
        for j in list(range(before)) + list(range(before + size, before + size + after)):
            folded[padded_source(j - before, size, mode)] += moved[j]
        g = np.moveaxis(folded, 0, axis)
    return g
