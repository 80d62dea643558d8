"""Page-locked host arrays: the GPU reads them by DMA at full link speed, without staging."""

import math
import threading
import weakref

import numpy as np

from pyooc._arrays import as_int, as_shape
from pyooc._exceptions import CudaError
from pyooc._layouts import CHANNELS_LAST, array_layouts
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


# The arrays pin() registered, by data address: (bytes, the finalizer that unregisters them when
# the memory's owner dies, so that no freed memory stays registered).
_registered = {}
_registered_lock = threading.Lock()


def _owner(array):
    """The array that owns `array`'s memory (views keep it alive; when it dies, the memory goes)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def pin(array):
    """Page-locks an existing dense numpy array (C-contiguous, or channels-last as torch's
    channels_last tensors are: docs/layouts.md) in place (cudaHostRegister), so pyooc's
    calls move it by DMA at the link's speed, as pinned_empty's arrays; returns the array. It stays
    pinned until unpin(array) or until its memory's owner is freed. Registering takes a fraction of
    allocating pinned memory (0.16 s for 4 GiB on the H200's host), but still pays only for an
    array a call reads more than once or a chain of calls shares. Raises pyooc.CudaError where no
    GPU is present."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"array must be a numpy.ndarray, got {type(array).__name__}")
    # A dense array's first element is the lowest address of its memory, whatever its order.
    if not (array.flags.c_contiguous or CHANNELS_LAST in array_layouts(array)):
        raise ValueError("array must be C-contiguous or channels-last (dense) to be pinned in place")
    address, nbytes = array.__array_interface__["data"][0], array.nbytes
    with _registered_lock:
        if address in _registered:
            return array
        try:
            _native.register_pinned(address, nbytes)
        except CudaError as e:
            if _native.device_count() > 0:
                raise
            raise CudaError(f"pin needs a CUDA GPU, and none is present ({e})", e.status) from None
        _registered[address] = (nbytes, weakref.finalize(_owner(array), _release, address))
    return array


def unpin(array):
    """Undoes pin(array); an array that is not pinned is left alone."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"array must be a numpy.ndarray, got {type(array).__name__}")
    entry = _registered.get(array.__array_interface__["data"][0])
    if entry is not None:
        entry[1]()  # the finalizer: unregisters once, and never again at the owner's death


def _release(address):
    with _registered_lock:
        if _registered.pop(address, None) is not None:
            _native.unregister_pinned(address)
