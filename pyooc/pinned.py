"""Page-locked host arrays: the GPU reads them by DMA at full link speed, without staging."""

import numpy as np

from pyooc._loader import load_native

_native = load_native()


def pinned_empty(shape, dtype=np.float32):
    """An uninitialised numpy array in page-locked (pinned) host memory, freed with the array.
    Raises pyooc.CudaError where no GPU is present."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    if count < 0 or any(d < 0 for d in shape):
        raise ValueError(f"shape must not have negative dimensions, got {list(shape)}")
    allocation = _native.PinnedAllocation(count * dtype.itemsize)
    return np.frombuffer(allocation, dtype=dtype, count=count).reshape(shape)
