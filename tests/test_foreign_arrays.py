"""Arrays from other libraries: CPU DLPack producers go in zero-copy, device-resident arrays that
pyooc cannot read in place are refused with an error that says so, and an np.memmap far larger than the plan's budget streams
through with the process's own memory bounded by the plan, not by the array."""

import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pyooc
import pytest


class DLPackOnly:
    """A CPU DLPack producer that is nothing else (no buffer protocol, no __array__), as JAX's CPU
    arrays present themselves to a consumer that asks for DLPack."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class FakeDevice:
    """What CuPy and torch CUDA tensors show: a device pointer (never dereferenced here)."""

    def __init__(self, shape, with_dlpack=False):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (0xDEAD0000, False), "version": 3}
        if with_dlpack:
            self.__dlpack_device__ = lambda: (2, 0)


class DLPackOnCuda:
    def __dlpack__(self, **kwargs):
        raise AssertionError("a device array must not be exported")

    def __dlpack_device__(self):
        return (2, 0)


def test_a_cpu_dlpack_array_goes_in_zero_copy(rng):
    x = rng.standard_normal((2, 3, 8, 8), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    view = pyooc._arrays.as_input(DLPackOnly(x), "x")
    assert np.shares_memory(view, x)
    np.testing.assert_array_equal(pyooc.conv_forward(DLPackOnly(x), DLPackOnly(w), padding=1, backend="host"),
                                  pyooc.conv_forward(x, w, padding=1, backend="host"))


def test_out_may_be_a_cpu_dlpack_array(rng):
    x = rng.standard_normal((2, 3, 4, 4), dtype=np.float32)
    out = np.full(x.shape, np.nan, np.float32)
    y = pyooc.activation_forward(x, "relu", out=DLPackOnly(out), backend="host")
    assert np.shares_memory(y, out)
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_a_dlpack_array_on_a_gpu_is_refused_not_copied():
    # DLPack alone exports no address pyooc can read in place (__cuda_array_interface__ does).
    with pytest.raises(TypeError, match=r"mat1 is a device-resident array .* on CUDA\); .*move it to the host first"):
        pyooc.matmul(DLPackOnCuda(), np.ones((4, 4), np.float32), backend="host")


@pytest.mark.parametrize("array", [FakeDevice((4, 4)), FakeDevice((4, 4), with_dlpack=True)],
                         ids=["cuda_array_interface", "cai_and_dlpack"])
def test_a_cuda_array_interface_array_is_read_in_place_not_copied(array):
    # Read in place on a GPU (tests/test_device_arrays_gpu.py); never copied to the host for it.
    with pytest.raises(TypeError, match=r"mat1 is a device-resident array, but backend='host' computes on the CPU"):
        pyooc.matmul(array, np.ones((4, 4), np.float32), backend="host")


def test_torch_cpu_tensors_go_in_zero_copy(rng):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng.standard_normal((2, 3, 8, 8), dtype=np.float32))
    view = pyooc._arrays.as_input(x, "x")
    assert view.ctypes.data == x.data_ptr()
    out = torch.empty_like(x)
    pyooc.activation_forward(x, "relu", out=out, backend="host")
    assert torch.equal(out, torch.relu(x))


MEMMAP_CHILD = textwrap.dedent("""
    import sys, threading, time
    import numpy as np, pyooc

    def rss_anon_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))

    path, nbytes, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    shape = (nbytes // (4 * 64 * 64 * 16), 16, 64, 64)
    x = np.memmap(path + ".x", dtype=np.float32, mode="r", shape=shape)
    y = np.memmap(path + ".y", dtype=np.float32, mode="w+", shape=shape)
    peak, done = [rss_anon_kib()], threading.Event()
    base = peak[0]

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon_kib())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    pyooc.activation_forward(x, "relu", out=y, memory_limit=limit, backend="host")
    done.set()
    sampler.join()
    y.flush()
    print((peak[0] - base) * 1024, pyooc.last_stats()["plan"].peak_device_bytes)
""")


def test_a_memmap_far_larger_than_the_budget_streams_with_bounded_memory(tmp_path):
    """The tensors are file-backed: their pages are the kernel's page cache (RssFile), which it
    reclaims under pressure, so an array larger than RAM streams through. What the process itself
    allocates (RssAnon: the host backend's "device" arena, staging, pyooc's state) stays at the
    plan's scale, far below the array's size."""
    nbytes, limit = 512 << 20, 16 << 20
    path = str(tmp_path / "big")
    with open(path + ".x", "wb") as f:  # sparse: reads as zeros, costs no disk until written
        f.truncate(nbytes)
    child = subprocess.run([sys.executable, "-c", MEMMAP_CHILD, path, str(nbytes), str(limit)], capture_output=True,
                           text=True, timeout=600, cwd=tempfile.gettempdir())
    assert child.returncode == 0, child.stderr
    growth, peak_device = map(int, child.stdout.split())
    assert peak_device <= limit
    assert growth < nbytes / 8, f"anonymous memory grew by {growth / 2**20:.0f} MiB for a {nbytes >> 20} MiB array"
    y = np.memmap(path + ".y", dtype=np.float32, mode="r")
    assert y.size == nbytes // 4 and not y[:: 4096].any()  # relu of zeros, written through the whole file
    del y
    os.remove(path + ".y")
