"""pyooc on dask arrays: each block computed by pyooc (on the worker's GPU, or its host backend),
the results those of the single call. `pip install pyooc[dask]`.

Geometry, as the planner's (docs/dask.md): a convolution or pooling output block of rows
[o0, o1) along a spatial axis reads the input rows [o0*s - p, (o1 - 1)*s - p + (k - 1)*d + 1). The
input is padded once (zeros; -inf for max pooling), rechunked so that each block starts at a
multiple of the stride, and given an after-halo of max((k - 1)*d + 1 - s, 0) rows with
`map_overlap`; each block then runs with padding 0 and yields exactly its output rows. Chunks along
N (and, for pooling, activation and batch norm, along C) need no halo; a convolution's C (its
reduction) and its weights stay whole in every block."""

import math

import dask.array as da
import numpy as np

import pyooc

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "pool_forward", "activation_forward",
           "batchnorm_forward_inference"]


def _tuple(value, spatial, name):
    from pyooc._arrays import spatial_tuple
    items = spatial_tuple(value, spatial, name)
    return items * spatial if len(items) == 1 else items  # an int applies to every spatial axis


def _as_dask(x, name):
    if not isinstance(x, da.Array):
        raise TypeError(f"{name} must be a dask.array.Array, got {type(x).__name__} (use pyooc.{name} for numpy)")
    if x.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
    return x


def _window_layout(x, whole_axes, kernel, stride, padding, dilation, pad_value):
    """x [N, C, *spatial] padded once, rechunked so that each spatial block starts at a multiple of
    the stride (`whole_axes` in one chunk), with the after-halo per axis (map_overlap's depth) and
    the output rows each block yields."""
    spatial = x.ndim - 2
    x = x.rechunk({a: -1 for a in whole_axes})
    padded = da.pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in padding), mode="constant", constant_values=pad_value)
    out_chunks, in_chunks, depth = [], [], {0: 0, 1: 0}
    for i in range(spatial):
        axis = 2 + i
        reach = (kernel[i] - 1) * dilation[i] + 1
        out_size = (padded.shape[axis] - reach) // stride[i] + 1
        if out_size < 1:
            raise ValueError(f"the output would be empty along spatial axis {i} (input {x.shape[axis]}, "
                             f"kernel {kernel[i]}, padding {padding[i]}, dilation {dilation[i]})")
        # Output blocks from the caller's chunks (rows per block / stride), none thinner than the halo.
        after = max(reach - stride[i], 0)
        target = max(1, x.chunks[axis][0] // stride[i], math.ceil(after / stride[i]))
        counts = [min(target, out_size - o) for o in range(0, out_size, target)]
        if len(counts) > 1 and counts[-1] * stride[i] < after:  # a last block too thin to lend a halo
            counts[-2] += counts.pop()
        rows = [c * stride[i] for c in counts]
        rows[-1] = padded.shape[axis] - sum(rows[:-1])  # the last block takes every remaining row
        out_chunks.append(tuple(counts))
        in_chunks.append(tuple(rows))
        depth[axis] = (0, after)
    return padded.rechunk((padded.chunks[0], padded.chunks[1], *in_chunks)), depth, out_chunks


def _windowed(x, whole_axes, kernel, stride, padding, dilation, pad_value, block_function, out_channels):
    """block_function(padded block with its halo) -> its output block, over every block of x."""
    padded, depth, out_chunks = _window_layout(x, whole_axes, kernel, stride, padding, dilation, pad_value)
    channel_chunks = (out_channels,) if out_channels is not None else padded.chunks[1]
    return padded.map_overlap(block_function, depth=depth, boundary="none", trim=False, dtype=np.float32,
                              chunks=(padded.chunks[0], channel_chunks, *out_chunks),
                              meta=np.empty((0,) * x.ndim, np.float32))


def conv_forward(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, memory_limit=None,
                 backend="auto"):
    """pyooc.conv_forward over a dask array x [N, C, *spatial]; w and bias are numpy arrays (whole
    in every block). Blocks along N and every spatial axis (with exact halos); C is made one chunk,
    so groups go to each block's call as they are."""
    x = _as_dask(x, "conv_forward")
    w = np.ascontiguousarray(w, dtype=np.float32)
    spatial = w.ndim - 2
    stride, padding, dilation = (_tuple(v, spatial, n) for v, n in ((stride, "stride"), (padding, "padding"),
                                                                    (dilation, "dilation")))
    if x.ndim != w.ndim or x.shape[1] != w.shape[1] * groups:
        raise ValueError(f"x of shape {list(x.shape)} does not match w of shape {list(w.shape)} (groups={groups})")

    def block(xb):
        return pyooc.conv_forward(np.ascontiguousarray(xb), w, bias, stride=stride, dilation=dilation, groups=groups,
                                  memory_limit=memory_limit, backend=backend)

    return _windowed(x, (1,), w.shape[2:], stride, padding, dilation, 0.0, block, w.shape[0])


def pool_forward(x, kernel, *, stride=None, padding=0, mode="max", memory_limit=None, backend="auto"):
    """pyooc.pool_forward over a dask array x [N, C, *spatial]: blocks along N, C and every spatial
    axis (halos of the window). mode "max" pads with -inf and "avg" with zeros (counted, as torch's
    count_include_pad), so every block runs unpadded; "avg_exclude_pad" with padding keeps the
    spatial axes whole (its divisor depends on where the tensor's edge is)."""
    x = _as_dask(x, "pool_forward")
    spatial = x.ndim - 2
    kernel = _tuple(kernel, spatial, "kernel")
    stride = kernel if stride is None else _tuple(stride, spatial, "stride")
    padding = _tuple(padding, spatial, "padding")
    if mode == "avg_exclude_pad" and any(padding):
        x = x.rechunk({2 + i: -1 for i in range(spatial)})
        return x.map_blocks(lambda b: pyooc.pool_forward(np.ascontiguousarray(b), kernel, stride=stride,
                                                         padding=padding, mode=mode, memory_limit=memory_limit,
                                                         backend=backend),
                            chunks=(x.chunks[0], x.chunks[1],
                                    *[((x.shape[2 + i] + 2 * padding[i] - kernel[i]) // stride[i] + 1,)
                                      for i in range(spatial)]), dtype=np.float32)

    def block(xb):
        return pyooc.pool_forward(np.ascontiguousarray(xb), kernel, stride=stride, mode=mode,
                                  memory_limit=memory_limit, backend=backend)

    pad_value = -np.inf if mode == "max" else 0.0
    return _windowed(x, (), kernel, stride, padding, (1,) * spatial, pad_value, block, None)


def activation_forward(x, mode, *, coef=None, memory_limit=None, backend="auto"):
    """pyooc.activation_forward block by block (element-wise: any chunks)."""
    x = _as_dask(x, "activation_forward")
    return x.map_blocks(lambda b: pyooc.activation_forward(np.ascontiguousarray(b), mode, coef=coef,
                                                           memory_limit=memory_limit, backend=backend),
                        dtype=np.float32)


def batchnorm_forward_inference(x, scale, bias, mean, var, *, eps=1e-5, memory_limit=None, backend="auto"):
    """pyooc.batchnorm_forward_inference block by block: chunks along N, C and space; each block
    gets its channels' statistics (numpy arrays of C floats)."""
    x = _as_dask(x, "batchnorm_forward_inference")
    params = [np.ascontiguousarray(p, dtype=np.float32) for p in (scale, bias, mean, var)]

    def block(b, block_info=None):
        c0, c1 = block_info[0]["array-location"][1]
        s, bb, m, v = (np.ascontiguousarray(p[c0:c1]) for p in params)
        return pyooc.batchnorm_forward_inference(np.ascontiguousarray(b), s, bb, m, v, eps=eps,
                                                 memory_limit=memory_limit, backend=backend)

    return x.map_blocks(block, dtype=np.float32)


def conv_backward_filter(x, dy, w_shape, *, stride=1, padding=0, dilation=1, groups=1, memory_limit=None,
                         backend="auto"):
    """dw over dask arrays x and dy [N, K, *out]: each block of dy with the x rows its outputs read
    (conv_forward's haloed blocks), its partial dw summed over the blocks. The sums run in another
    order than the single call's: equal to float32 rounding, not bit for bit. A dask array of w_shape."""
    import dask

    x, dy = _as_dask(x, "conv_backward_filter"), _as_dask(dy, "conv_backward_filter")
    w_shape = tuple(int(d) for d in w_shape)
    spatial = len(w_shape) - 2
    stride, padding, dilation = (_tuple(v, spatial, n) for v, n in ((stride, "stride"), (padding, "padding"),
                                                                    (dilation, "dilation")))
    padded, depth, out_chunks = _window_layout(x, (1,), w_shape[2:], stride, padding, dilation, 0.0)
    haloed = da.overlap.overlap(padded, depth=depth, boundary="none")
    dy = dy.rechunk((padded.chunks[0], (dy.shape[1],), *out_chunks))

    def partial(xb, dyb):
        return pyooc.conv_backward_filter(np.ascontiguousarray(xb), np.ascontiguousarray(dyb), w_shape,
                                          stride=stride, dilation=dilation, groups=groups,
                                          memory_limit=memory_limit, backend=backend)

    parts = [da.from_delayed(dask.delayed(partial, pure=True)(haloed.blocks[i], dy.blocks[i]), w_shape,
                             dtype=np.float32) for i in np.ndindex(*haloed.numblocks)]
    return da.stack(parts).sum(axis=0, dtype=np.float32)


def conv_backward_data(dy, w, x_shape, *, stride=1, padding=0, dilation=1, groups=1, memory_limit=None,
                       backend="auto"):
    """dx over a dask array dy, block by block along N (dx's spatial rows gather from overlapping dy
    windows, so dy's spatial axes and channels are made whole in each block): exact, bit for bit."""
    dy = _as_dask(dy, "conv_backward_data")
    w = np.ascontiguousarray(w, dtype=np.float32)
    x_shape = tuple(int(d) for d in x_shape)
    dy = dy.rechunk({a: -1 for a in range(1, dy.ndim)})

    def block(dyb, block_info=None):
        n0, n1 = block_info[0]["array-location"][0]
        return pyooc.conv_backward_data(np.ascontiguousarray(dyb), w, (n1 - n0,) + x_shape[1:], stride=stride,
                                        padding=padding, dilation=dilation, groups=groups,
                                        memory_limit=memory_limit, backend=backend)

    return dy.map_blocks(block, chunks=(dy.chunks[0],) + tuple((d,) for d in x_shape[1:]), dtype=np.float32)
