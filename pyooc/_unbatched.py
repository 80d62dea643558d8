"""Unbatched input, accepted where torch accepts it: conv_forward of x [C, *spatial] (one rank
below w, as F.conv2d takes (C, H, W)) and pool_forward of x [C, *spatial] with a kernel tuple of
x.ndim - 1 sizes (an int kernel leaves x batched: [N, C, L] and [C, H, W] have the same rank).
The call runs on a batch of one, a view; its result and out= are unbatched too."""

import numpy as np

from pyooc._device_arrays import DeviceArray


def as_batch_of_one(x, unbatched, out=None):
    """(x, out) with a batch dimension of one put in front (views, of host arrays or DeviceArrays:
    pyooc/_device_arrays.py) when unbatched, else as given."""
    if not unbatched:
        return x, out
    if isinstance(out, (np.ndarray, DeviceArray)):
        out = out.reshape((1,) + tuple(out.shape))
    return x.reshape((1,) + tuple(x.shape)), out


def without_batch(y, unbatched):
    return y.reshape(tuple(y.shape)[1:]) if unbatched else y
