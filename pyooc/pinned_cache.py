"""pyooc's results in page-locked memory: a cache of pinned blocks that the arrays pyooc allocates
(results of calls without `out=`) are cut from. The GPU writes a result by DMA straight into it (no
scatter by host threads, no first-touch page faults), and the next pyooc call reads it at the
link's speed: a chain of calls pays host staging at neither end.

cudaHostAlloc is slow (1.6 GB/s on the H200's host, docs/ARCHITECTURE.md's machine figures), so
blocks are kept and reused across calls: a result's block goes back to the cache when the last
array viewing it (views included) is gone (pyooc._native.BufferLease), never earlier, so no block
is reused while anything can still read it or a copy can still target it (pyooc's calls return
after their last copy). The cache holds at most `cap` bytes, leased and idle together; beyond it,
idle blocks are freed oldest first, and a request that still does not fit gets a pageable numpy
array. Without a GPU, or with the cache turned off (set_pinned_results(False)), results are plain
numpy arrays. `out=` always writes the caller's array."""

import collections
import math
import threading

import numpy as np

from pyooc._loader import load_native

_native = load_native()

MiB = 1 << 20
# Blocks come in multiples of this; smaller results are plain numpy arrays (the link barely notices them).
GRANULE = 2 * MiB
SMALLEST = 1 * MiB


class PinnedCache:
    """Blocks of page-locked memory from allocate(nbytes) (a writable buffer exporter), leased to
    arrays and reused. A block serves a request at most twice its size smaller (no tiny array
    pins a huge block)."""

    def __init__(self, allocate, cap):
        self._allocate = allocate
        self._cap = int(cap)
        self._idle = collections.OrderedDict()  # id(block) -> (size, block), least recently used first
        self._held = 0  # bytes of every block, leased or idle
        self._leased = 0
        self._reused = 0
        self._lock = threading.Lock()

    @property
    def cap(self):
        return self._cap

    def set_cap(self, cap):
        with self._lock:
            self._cap = int(cap)
            self._trim(0)

    def info(self):
        with self._lock:
            idle = sum(size for size, _ in self._idle.values())
            return {"cap": self._cap, "held_bytes": self._held, "idle_bytes": idle,
                    "leased_bytes": self._held - idle, "leases": self._leased, "reused": self._reused}

    def empty(self, shape, dtype):
        """An uninitialised array of shape and dtype in a cached block, or None when it does not
        fit the cap (the caller then allocates pageable memory)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        size = max(GRANULE, -(-nbytes // GRANULE) * GRANULE)
        block = None
        with self._lock:
            best = None
            for key, (have, candidate) in self._idle.items():
                if size <= have <= 2 * size and (best is None or have < best[1]):
                    best = (key, have, candidate)
            if best is not None:
                del self._idle[best[0]]
                size, block = best[1], best[2]
                self._reused += 1
            else:
                if size > self._cap:
                    return None
                self._trim(size)
                if self._held + size > self._cap:
                    return None
                self._held += size  # reserved before the (slow) allocation, outside the lock
        if block is None:
            try:
                block = self._allocate(size)
            except BaseException:
                with self._lock:
                    self._held -= size
                raise
        with self._lock:
            self._leased += 1
        lease = _native.BufferLease(block, nbytes, self._give_back)
        return np.frombuffer(lease, dtype=dtype, count=math.prod(shape)).reshape(shape)

    def clear(self):
        """Frees every idle block (leased ones come back, and are kept, as their arrays die)."""
        with self._lock:
            self._trim(self._cap + self._held)

    def _give_back(self, block):
        # Called by a lease's deallocation (pyooc._native.BufferLease), whenever the last view of
        # a result goes away.
        size = len(memoryview(block))
        with self._lock:
            self._leased -= 1
            self._idle[id(block)] = (size, block)
            self._idle.move_to_end(id(block))
            self._trim(0)

    def _trim(self, room):
        """Frees idle blocks, oldest first, until `room` more bytes fit the cap (caller holds the lock)."""
        while self._idle and self._held + room > self._cap:
            _, (size, _) = self._idle.popitem(last=False)
            self._held -= size


def _default_cap():
    """A quarter of the host's physical memory, at most 32 GiB."""
    try:
        import os

        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 16 << 30
    return min(physical // 4, 32 << 30)


_cache = PinnedCache(_native.PinnedAllocation, _default_cap())
_enabled = True


def set_pinned_results(enabled=True, *, cap=None):
    """Whether results pyooc allocates come from the pinned cache (default: yes, where a GPU is
    present), and its cap in bytes or "8GiB" (default: a quarter of host memory, at most 32 GiB).
    Turning it off frees the idle blocks; leased ones are freed as their arrays die."""
    global _enabled
    from pyooc.memory import parse_memory_limit

    _enabled = bool(enabled)
    if cap is not None:
        _cache.set_cap(parse_memory_limit(cap, "cap"))
    if not _enabled:
        _cache.clear()


def pinned_results():
    """The cache's state: enabled, cap, held / idle / leased bytes, leases out, blocks reused."""
    return {"enabled": _enabled and _native.device_count() > 0, **_cache.info()}


def new_result(shape, dtype=np.float32):
    """An uninitialised result array: from the pinned cache where it is on, a GPU is present and
    the result is large enough to matter; else a plain numpy array."""
    shape = tuple(shape)
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if _enabled and nbytes >= SMALLEST and _native.device_count() > 0:
        array = _cache.empty(shape, dtype)
        if array is not None:
            return array
    return np.empty(shape, dtype=dtype)
