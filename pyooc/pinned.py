"""Page-locked host arrays: the GPU reads them by DMA at full link speed, without staging."""

import math

import numpy as np

from pyooc._arrays import as_int, as_shape
from pyooc._exceptions import CudaError
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
    try:
        allocation = _native.PinnedAllocation(count * dtype.itemsize)
    except CudaError as e:
        if _native.device_count() > 0:
            raise
        # Without a GPU, CUDA reports its driver ("insufficient for CUDA runtime version"): say what it means.
        raise CudaError(f"pinned_empty needs a CUDA GPU, and none is present ({e})", e.status) from None
    return np.frombuffer(allocation, dtype=dtype, count=count).reshape(shape)
