"""conv_forward reads the caller's arrays in place: no copy of x or w (tracemalloc sees numpy's
allocations), read-only and memory-mapped inputs work and stay unchanged, and out= is returned."""

import tracemalloc

import numpy as np
import pytest

import pyooc
from conftest import random_problem, reference_conv, rel_err

MiB = 2**20


def traced_peak(call):
    """Peak bytes allocated through Python's allocators and numpy's data allocator during call()."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - base


@pytest.fixture(scope="module")
def big():
    """x of 64 MiB with a cheap 1x1 convolution (K=1), so the run is quick."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((1, 4, 2048, 2048), dtype=np.float32)
    w = rng.standard_normal((1, 4, 1, 1), dtype=np.float32)
    return x, w


def check_big(x, w, y):
    ref = np.einsum("kc,nchw->nkhw", w[:, :, 0, 0].astype(np.float64), x[:, :, :64].astype(np.float64))
    assert rel_err(y[:, :, :64], ref) < 1e-5
    ref = np.einsum("kc,nchw->nkhw", w[:, :, 0, 0].astype(np.float64), x[:, :, -64:].astype(np.float64))
    assert rel_err(y[:, :, -64:], ref) < 1e-5


def test_tracemalloc_sees_numpy_copies(big):
    """The measuring tool works: a copy of x shows up in full."""
    x, _ = big
    copy, peak = traced_peak(lambda: np.ascontiguousarray(x, dtype=np.float32).copy())
    assert peak >= x.nbytes
    del copy


def test_no_copy_with_out(big):
    x, w = big
    assert x.nbytes == 64 * MiB
    out = np.full((1, 1, 2048, 2048), np.nan, dtype=np.float32)
    y, peak = traced_peak(lambda: pyooc.conv_forward(x, w, out=out, backend="host"))
    assert y is out
    assert peak < 1 * MiB, f"conv_forward allocated {peak} bytes on the Python/numpy side (x is {x.nbytes})"
    assert not np.isnan(out).any()
    check_big(x, w, out)


def test_no_copy_without_out(big):
    x, w = big
    y_bytes = 2048 * 2048 * 4
    y, peak = traced_peak(lambda: pyooc.conv_forward(x, w, backend="host"))
    assert y.shape == (1, 1, 2048, 2048)
    assert y_bytes <= peak < y_bytes + 1 * MiB, f"allocated {peak} bytes; only y ({y_bytes}) is needed"
    check_big(x, w, y)


def test_no_copy_with_split_plan(big):
    """A plan with many chunks reads regions straight from x too."""
    x, w = big
    out = np.empty((1, 1, 2048, 2048), dtype=np.float32)
    _, peak = traced_peak(lambda: pyooc.conv_forward(x, w, out=out, memory_limit="1MiB", backend="host"))
    assert pyooc.last_stats()["plan"].num_chunks > 16
    assert peak < 1 * MiB
    check_big(x, w, out)


def test_read_only_inputs(rng):
    x, w, b = random_problem(rng, (2, 3, 10, 9), (4, 3, 3, 3), bias=True)
    expected = reference_conv(x, w, b, padding=1)
    for a in (x, w, b):
        a.setflags(write=False)
    y = pyooc.conv_forward(x, w, bias=b, padding=1, memory_limit="4KiB", backend="host")
    assert rel_err(y, expected) < 1e-5
    assert pyooc.last_stats()["plan"].num_chunks > 1


def test_inputs_backed_by_immutable_bytes(rng):
    x0, w0, b0 = random_problem(rng, (2, 3, 7, 8), (4, 3, 3, 2), bias=True)
    x = np.frombuffer(x0.tobytes(), dtype=np.float32).reshape(x0.shape)
    w = np.frombuffer(w0.tobytes(), dtype=np.float32).reshape(w0.shape)
    b = np.frombuffer(b0.tobytes(), dtype=np.float32)
    assert not x.flags.writeable and not w.flags.writeable
    y = pyooc.conv_forward(x, w, bias=b, backend="host")
    assert rel_err(y, reference_conv(x0, w0, b0)) < 1e-5
    assert x.tobytes() == x0.tobytes() and w.tobytes() == w0.tobytes()


def test_inputs_unchanged_bytewise(rng):
    x, w, b = random_problem(rng, (3, 4, 17, 13), (5, 4, 3, 3), bias=True)
    before = x.tobytes(), w.tobytes(), b.tobytes()
    out = rng.standard_normal((3, 5, 17, 13), dtype=np.float32)
    pyooc.conv_forward(x, w, bias=b, padding=1, beta=0.5, out=out, memory_limit="8KiB", backend="host")
    assert (x.tobytes(), w.tobytes(), b.tobytes()) == before


def test_memmap_inputs_and_out(rng, tmp_path):
    x0, w0, b0 = random_problem(rng, (2, 8, 64, 64), (6, 8, 3, 3), bias=True)
    x_path, w_path, y_path = tmp_path / "x.f32", tmp_path / "w.f32", tmp_path / "y.f32"
    for path, a in ((x_path, x0), (w_path, w0)):
        m = np.memmap(path, dtype=np.float32, mode="w+", shape=a.shape)
        m[...] = a
        m.flush()
        del m
    x = np.memmap(x_path, dtype=np.float32, mode="r", shape=x0.shape)
    w = np.memmap(w_path, dtype=np.float32, mode="r", shape=w0.shape)
    out = np.memmap(y_path, dtype=np.float32, mode="w+", shape=(2, 6, 64, 64))
    out[...] = np.nan
    y = pyooc.conv_forward(x, w, bias=b0, padding=1, out=out, memory_limit="64KiB", backend="host")
    assert y is out
    assert pyooc.last_stats()["plan"].num_chunks > 1
    out.flush()
    del out
    written = np.fromfile(y_path, dtype=np.float32).reshape(2, 6, 64, 64)
    assert rel_err(written, reference_conv(x0, w0, b0, padding=1)) < 1e-5
    assert np.array_equal(np.fromfile(x_path, dtype=np.float32).reshape(x0.shape), x0)


def test_returns_out_object(rng):
    x, w, _ = random_problem(rng, (1, 2, 6, 6), (3, 2, 3, 3))
    out = np.empty((1, 3, 4, 4), dtype=np.float32)
    assert pyooc.conv_forward(x, w, out=out, backend="host") is out
    assert rel_err(out, reference_conv(x, w)) < 1e-5


def test_out_view_of_larger_array(rng):
    """out may be a contiguous view (a slice of a bigger buffer); only its own elements are written."""
    x, w, _ = random_problem(rng, (2, 2, 6, 6), (3, 2, 3, 3))
    big = np.full((4, 3, 4, 4), np.nan, dtype=np.float32)
    view = big[1:3]
    assert view.flags.c_contiguous and view.base is big
    y = pyooc.conv_forward(x, w, out=view, backend="host")
    assert y is view
    assert rel_err(big[1:3], reference_conv(x, w)) < 1e-5
    assert np.isnan(big[0]).all() and np.isnan(big[3]).all()
