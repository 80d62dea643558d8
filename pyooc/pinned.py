"""Page-locked host arrays: the GPU reads them by DMA at full link speed, without staging."""

import math

import numpy as np

from pyooc._arrays import as_int, as_shape
from pyooc._loader import load_native
from pyooc.memory import MAX_BYTES

_native = load_native()


def pinned_empty(shape, dtype=np.float32):
    """An uninitialised numpy array in page-locked (pinned) host memory, freed with the array.
    Raises pyooc.CudaError where no GPU is present."""
    if dtype is None:  # np.dtype(None) is float64: not what a float32 library's caller means
        raise TypeError("dtype must be a numpy dtype, got None")
    dtype = np.dtype(dtype)
    shape = (as_int(shape, "shape"),) if isinstance(shape, int) else as_shape(shape, "shape")
    if any(d < 0 for d in shape):
        raise ValueError(f"shape must not have negative dimensions, got {list(shape)}")
    count = math.prod(shape)  # exact: numpy's int64 product would wrap
    if count * dtype.itemsize > MAX_BYTES:
        raise ValueError(f"shape {list(shape)} of {dtype} needs more than {MAX_BYTES} bytes")
    allocation = _native.PinnedAllocation(count * dtype.itemsize)
    return np.frombuffer(allocation, dtype=dtype, count=count).reshape(shape)
