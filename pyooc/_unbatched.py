"""Unbatched input, accepted where torch accepts it: conv_forward of x [C, *spatial] (one rank
below w, as F.conv2d takes (C, H, W)) and pool_forward of x [C, *spatial] with a kernel tuple of
x.ndim - 1 sizes (an int kernel leaves x batched: [N, C, L] and [C, H, W] have the same rank).
The call runs on a batch of one, a view; its result and out= are unbatched too."""

import numpy as np


def as_batch_of_one(x, unbatched, out=None):
    """(x, out) with a batch dimension of one put in front (views) when unbatched, else as given."""
    if not unbatched:
        return x, out
    if out is not None and isinstance(out, np.ndarray):
        out = out[np.newaxis]
    return x[np.newaxis], out


def without_batch(y, unbatched):
    return y[0] if unbatched else y
