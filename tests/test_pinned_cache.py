"""The pinned result cache (pyooc/pinned_cache.py) on the CPU: its bookkeeping with host
bytearrays standing in for page-locked blocks (reuse, best fit, the cap, release only when the
last view of a result dies, a result alive as the next call's input is not reused for its output),
and pyooc's results without a GPU: plain numpy arrays, out= the caller's. Its GPU twins, with real
pinned blocks, are in tests/test_gpu.py."""

import gc

import numpy as np
import pytest

import pyooc
from pyooc import pinned_cache
from pyooc.pinned_cache import GRANULE, PinnedCache

MiB = 1 << 20


class Recorder:
    """An allocator of host blocks that records every allocation."""

    def __init__(self):
        self.sizes = []

    def __call__(self, nbytes):
        self.sizes.append(nbytes)
        return bytearray(nbytes)


def test_a_block_is_reused_once_its_array_is_gone():
    alloc = Recorder()
    cache = PinnedCache(alloc, 64 * MiB)
    a = cache.empty((3 * MiB // 4,), np.float32)  # 3 MiB: one 4 MiB block
    a[:] = 1
    assert alloc.sizes == [4 * MiB] and cache.info()["leased_bytes"] == 4 * MiB
    del a
    gc.collect()
    assert cache.info()["idle_bytes"] == 4 * MiB
    b = cache.empty((MiB // 2,), np.float32)  # 2 MiB: the idle 4 MiB block is at most twice its size
    assert alloc.sizes == [4 * MiB], "reused, not allocated"
    assert cache.info()["reused"] == 1
    c = cache.empty((MiB // 4,), np.float32)  # another 2 MiB while b holds the block: a new one
    assert alloc.sizes == [4 * MiB, 2 * MiB]
    assert b.ctypes.data != c.ctypes.data
    del b, c


def test_views_keep_the_block():
    cache = PinnedCache(Recorder(), 64 * MiB)
    a = cache.empty((4, MiB // 4), np.float32)
    view = a[1:3]
    del a
    gc.collect()
    assert cache.info()["idle_bytes"] == 0, "a view of the result still reads the block"
    del view
    gc.collect()
    assert cache.info()["idle_bytes"] == cache.info()["held_bytes"] > 0


def test_a_small_request_does_not_take_a_huge_block():
    alloc = Recorder()
    cache = PinnedCache(alloc, 256 * MiB)
    big = cache.empty((16 * MiB,), np.uint8)
    del big
    gc.collect()
    small = cache.empty((2 * MiB,), np.uint8)
    assert alloc.sizes == [16 * MiB, 2 * MiB]
    del small


def test_the_cap_frees_idle_blocks_oldest_first_and_refuses_beyond_it():
    alloc = Recorder()
    cache = PinnedCache(alloc, 8 * MiB)
    a, b = cache.empty((2 * MiB,), np.uint8), cache.empty((4 * MiB,), np.uint8)
    del a
    gc.collect()
    assert cache.info()["held_bytes"] == 6 * MiB
    c = cache.empty((4 * MiB,), np.uint8)  # 4 more than fit: the idle 2 MiB block is freed first
    assert cache.info()["held_bytes"] == 8 * MiB and cache.info()["idle_bytes"] == 0
    assert cache.empty((2 * MiB,), np.uint8) is None, "over the cap: the caller allocates pageable memory"
    assert cache.empty((9 * MiB,), np.uint8) is None
    del b, c
    gc.collect()
    cache.set_cap(4 * MiB)
    assert cache.info()["held_bytes"] <= 4 * MiB
    cache.clear()
    assert cache.info()["held_bytes"] == 0


def test_a_live_input_is_not_reused_for_the_output():
    """A chain: the result of one call is the next call's input while it runs, so the next
    result cannot be cut from the same block."""
    cache = PinnedCache(Recorder(), 64 * MiB)
    y1 = cache.empty((MiB,), np.float32)
    y2 = cache.empty((MiB,), np.float32)
    assert not np.shares_memory(y1, y2)
    y1 = None
    gc.collect()
    y3 = cache.empty((MiB,), np.float32)  # y1's block, now idle
    assert not np.shares_memory(y2, y3)


def test_a_failed_allocation_leaves_nothing_held():
    def failing(nbytes):
        raise MemoryError("cudaHostAlloc failed")

    cache = PinnedCache(failing, 64 * MiB)
    with pytest.raises(MemoryError):
        cache.empty((MiB,), np.float32)
    assert cache.info()["held_bytes"] == 0


def leased(array):
    """Whether the array's memory is a cache lease (somewhere down its chain of bases)."""
    while array is not None:
        if isinstance(array, pyooc._native.BufferLease):
            return True
        array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
    return False


def test_without_a_gpu_results_are_plain_numpy_and_out_is_the_callers(rng):
    if pyooc.device_count() > 0:
        pytest.skip("a GPU is present: tests/test_gpu.py checks the pinned results")
    x = rng.standard_normal((2, 3, 300, 300), dtype=np.float32)  # a 2 MiB result
    y = pyooc.activation_forward(x, "relu", backend="host")
    assert not leased(y)
    assert pyooc.pinned_results()["enabled"] is False
    out = np.empty_like(x)
    assert pyooc.activation_forward(x, "relu", out=out, backend="host") is out


class OneGpu:
    """pyooc._native as new_result sees it on a machine with a GPU."""

    BufferLease = pyooc._native.BufferLease

    def device_count(self):
        return 1


@pytest.fixture
def cache_as_if_on_a_gpu(monkeypatch):
    cache = PinnedCache(Recorder(), 64 * MiB)
    monkeypatch.setattr(pinned_cache, "_native", OneGpu())
    monkeypatch.setattr(pinned_cache, "_cache", cache)
    yield cache
    pinned_cache.set_pinned_results(True)


def test_results_come_from_the_cache_where_a_gpu_is(cache_as_if_on_a_gpu):
    big, small = pinned_cache.new_result((4, MiB // 4)), pinned_cache.new_result((16, 16))
    assert leased(big), "a 4 MiB result is cut from a pinned block"
    assert not leased(small), "below 1 MiB: a plain numpy array"
    assert cache_as_if_on_a_gpu.info()["leases"] == 1
    over = pinned_cache.new_result((80 * MiB // 4,))
    assert not leased(over) and over.shape == (80 * MiB // 4,), "over the cap: pageable"


def test_the_setting_turns_the_cache_off(cache_as_if_on_a_gpu):
    pinned_cache.set_pinned_results(False)
    assert pinned_cache.pinned_results()["enabled"] is False
    assert not leased(pinned_cache.new_result((4, MiB)))
    pinned_cache.set_pinned_results(True, cap="32MiB")
    assert pinned_cache.pinned_results() == {**pinned_cache.pinned_results(), "enabled": True, "cap": 32 * MiB}
    assert leased(pinned_cache.new_result((4, MiB // 4)))
    with pytest.raises(ValueError, match="cap"):
        pinned_cache.set_pinned_results(True, cap="lots")


def test_granule_rounding():
    alloc = Recorder()
    cache = PinnedCache(alloc, 64 * MiB)
    a = cache.empty((GRANULE + 1,), np.uint8)
    assert alloc.sizes == [2 * GRANULE]
    assert a.nbytes == GRANULE + 1
    del a


def test_pin_names_what_it_needs(rng):
    x = rng.standard_normal((4, 5), dtype=np.float32)
    with pytest.raises(TypeError, match="array must be a numpy.ndarray"):
        pyooc.pin([1.0, 2.0])
    with pytest.raises(ValueError, match="C-contiguous"):
        pyooc.pin(x[:, ::2])
    if pyooc.device_count() == 0:
        with pytest.raises(pyooc.CudaError, match="pin needs a CUDA GPU, and none is present"):
            pyooc.pin(x)
        pyooc.unpin(x)  # not pinned: left alone
