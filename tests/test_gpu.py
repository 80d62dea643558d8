"""The cuda backend on a real GPU: numerics against the float64 reference and the host backend
(FP32 math, no TF32), every split kind, a working set far above its budget, device memory held
within the budget, no leaks over repeated calls, recovery from injected CUDA/cuDNN faults, and
pinned arrays. Every test here is marked `gpu` and skips where pyooc.device_count() == 0.

Device memory is read with cupy (or torch), imported lazily inside the tests that need it."""

import threading
import time

import numpy as np
import pytest

import pyooc
from conftest import (INJECTED_FAULT_STATUS, TOL, find_budget, output_shape, random_problem, reference_at,
                      needed_budget, reference_conv, rel_err, run_checked, smallest_budget, split_set)
from test_conv_host import ALPHA_BETA_SPLITS, GEOMETRIES, SPLITS, SPLITS_AT_LEAST

pytestmark = pytest.mark.gpu

MiB = 2**20
# Device allocations are rounded to 2 MiB pages; cuDNN may keep a little of its own between calls.
SLACK = 8 * MiB


def device_free_bytes():
    """A function returning the device's free memory in bytes (cupy, else torch)."""
    try:
        import cupy

        cupy.cuda.runtime.memGetInfo()
        return lambda: cupy.cuda.runtime.memGetInfo()[0]
    except Exception:  # noqa: BLE001 - any failure: try torch
        import torch

        torch.cuda.mem_get_info(0)
        return lambda: torch.cuda.mem_get_info(0)[0]


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def host_result(x, w, bias=None, **kwargs):
    return pyooc.conv_forward(x, w, bias=bias, backend="host", **kwargs)


def pinned_copy(a):
    p = pyooc.pinned_empty(a.shape, a.dtype)
    p[...] = a
    return p


# --------------------------------------------------------------------------------------------
# Numerics


@pytest.mark.gpu
@pytest.mark.parametrize("x_shape, w_shape, geometry", GEOMETRIES + [
    pytest.param((2, 256, 16, 16), (64, 256, 3, 3), dict(padding=1), id="2d-long-reduction-catches-tf32"),
    pytest.param((1, 128, 8, 8, 8), (32, 128, 3, 3, 3), dict(padding=1), id="3d-long-reduction-catches-tf32"),
])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_cuda_geometries(rng, x_shape, w_shape, geometry, with_bias):
    x, w, b = random_problem(rng, x_shape, w_shape, bias=with_bias)
    plan = run_checked(x, w, bias=b, backend="cuda", **geometry)
    assert plan.backend == "cuda"
    y = pyooc.conv_forward(x, w, bias=b, backend="cuda", **geometry)
    assert rel_err(y, host_result(x, w, b, **geometry)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS)
def test_cuda_forced_split(rng, x_shape, w_shape, geometry, want):
    limit, planned = find_budget(x_shape, w_shape, set(want), bias=True, backend="cuda", **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    plan = run_checked(x, w, bias=b, memory_limit=limit, backend="cuda", **geometry)
    assert split_set(plan) == set(want), plan.splits
    assert plan.splits == planned.splits
    y = pyooc.conv_forward(x, w, bias=b, memory_limit=limit, backend="cuda", **geometry)
    assert rel_err(y, host_result(x, w, b, memory_limit=limit, **geometry)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS_AT_LEAST)
def test_cuda_split_realistic_shapes(rng, x_shape, w_shape, geometry, want):
    limit, _ = find_budget(x_shape, w_shape, set(want), at_least=True, bias=True, backend="cuda", **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    plan = run_checked(x, w, bias=b, memory_limit=limit, backend="cuda", **geometry)
    assert set(want) <= split_set(plan)


@pytest.mark.gpu
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS[::3])
def test_cuda_forced_split_pinned(rng, x_shape, w_shape, geometry, want):
    """Pinned x, w, bias and out go by direct (strided) DMA, halos zeroed on the device."""
    limit, _ = find_budget(x_shape, w_shape, set(want), bias=True, backend="cuda", **geometry)
    x, w, b = (pinned_copy(a) for a in random_problem(rng, x_shape, w_shape, bias=True))
    out = pyooc.pinned_empty(output_shape(x_shape, w_shape, **geometry))
    out[...] = np.nan
    plan = run_checked(x, w, bias=b, out=out, memory_limit=limit, backend="cuda", direct=True, **geometry)
    assert split_set(plan) == set(want)


@pytest.mark.gpu
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, -1.5), (0.0, 1.0), (-1.0, 0.0)])
@pytest.mark.parametrize("x_shape, w_shape, geometry, split", ALPHA_BETA_SPLITS)
def test_cuda_alpha_beta_bias(rng, alpha, beta, x_shape, w_shape, geometry, split):
    limit = None
    if split:
        limit, _ = find_budget(x_shape, w_shape, set(split), bias=True, beta=beta, backend="cuda", **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    out = rng.standard_normal(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    out_host = out.copy()
    plan = run_checked(x, w, bias=b, alpha=alpha, beta=beta, out=out, memory_limit=limit, backend="cuda", **geometry)
    if split:
        assert split_set(plan) == set(split)
    host_result(x, w, b, alpha=alpha, beta=beta, out=out_host, **geometry)
    assert rel_err(out, out_host) < TOL


@pytest.mark.gpu
def test_cuda_is_default_backend(rng):
    x, w, _ = random_problem(rng, (2, 3, 9, 9), (4, 3, 3, 3))
    pyooc.conv_forward(x, w)
    assert pyooc.last_stats()["plan"].backend == "cuda"
    assert pyooc.info()["default_backend"] == "cuda"


# --------------------------------------------------------------------------------------------
# Out of core for real: a working set of >= 4 GB through a 512 MiB budget


@pytest.mark.gpu
def test_large_working_set_small_budget(rng):
    x_shape, w_shape, geometry = (8, 32, 128, 128, 128), (32, 32, 3, 3, 3), dict(padding=1)  # x, y: 2 GiB each
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(32 * 27))).astype(np.float32)
    b = rng.standard_normal(32, dtype=np.float32)
    y = np.full(output_shape(x_shape, w_shape, **geometry), np.nan, dtype=np.float32)
    assert x.nbytes + w.nbytes + y.nbytes >= 4e9
    limit = 512 * MiB
    pyooc.conv_forward(x, w, bias=b, out=y, memory_limit=limit, backend="cuda", **geometry)
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.num_chunks > 1 and stats["device_bytes_reserved"] <= limit
    assert stats["bytes_d2h"] == y.nbytes and stats["bytes_h2d"] >= x.nbytes + w.nbytes
    assert not np.isnan(y).any(), "outputs never written"
    picks = [tuple(int(rng.integers(0, s)) for s in y.shape) for _ in range(300)]
    # Include the borders (halo and padding) of the volume, where chunk edges are hardest.
    picks += [(0, 0, 0, 0, 0), (7, 31, 127, 127, 127), (1, 5, 0, 127, 64), (2, 7, 127, 0, 0)]
    got = np.array([y[i] for i in picks], dtype=np.float64)
    ref = np.array([reference_at(x, w, i, b, **geometry) for i in picks])
    assert rel_err(got, ref) < TOL


# --------------------------------------------------------------------------------------------
# Device memory: held within the budget during a call, back afterwards, no leaks


@pytest.mark.gpu
def test_device_memory_within_budget_during_call(rng):
    free = device_free_bytes()
    x_shape, w_shape, geometry = (4, 32, 32, 128, 128), (32, 32, 3, 3, 3), dict(padding=1)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(32 * 27))).astype(np.float32)
    b = rng.standard_normal(32, dtype=np.float32)
    out = np.empty(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    limit = 256 * MiB
    # Warm-up: the backend, cuDNN handle, algorithm choices and lazily loaded kernels exist after it.
    pyooc.conv_forward(x, w, bias=b, out=out, memory_limit=limit, backend="cuda", **geometry)
    time.sleep(0.2)
    baseline = free()

    lowest = [baseline]
    polls = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            lowest[0] = min(lowest[0], free())
            polls[0] += 1

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        pyooc.conv_forward(x, w, bias=b, out=out, memory_limit=limit, backend="cuda", **geometry)
    finally:
        done.set()
        watcher.join()
    stats = pyooc.last_stats()
    used = baseline - lowest[0]
    assert polls[0] > 10, "the watcher hardly ran (was the GIL released?)"
    assert stats["device_bytes_reserved"] <= limit
    assert used <= limit + SLACK, f"device memory rose by {used / MiB:.1f} MiB during a call limited to 256 MiB"
    assert used >= stats["device_bytes_reserved"] // 2, (
        f"the watcher saw only {used / MiB:.1f} MiB of a {stats['device_bytes_reserved'] / MiB:.1f} MiB arena")
    time.sleep(0.1)
    assert abs(free() - baseline) <= SLACK, "device memory not returned after the call"
    picks = [tuple(int(rng.integers(0, s)) for s in out.shape) for _ in range(100)]
    assert rel_err(np.array([out[i] for i in picks]), np.array([reference_at(x, w, i, b, **geometry)
                                                                for i in picks])) < TOL


@pytest.mark.gpu
def test_repeated_calls_do_not_leak(rng):
    free = device_free_bytes()
    x, w, b = random_problem(rng, (2, 8, 24, 24), (8, 8, 3, 3), bias=True)
    limit = 2 * smallest_budget(x.shape, w.shape, bias=True, backend="cuda", padding=1)
    for _ in range(10):
        pyooc.conv_forward(x, w, bias=b, padding=1, memory_limit=limit, backend="cuda")
    assert pyooc.last_stats()["chunks"] > 1
    pinned_x = pinned_copy(x)
    pyooc.conv_forward(pinned_x, w, bias=b, padding=1, memory_limit=limit, backend="cuda")
    time.sleep(0.1)
    dev0, rss0 = free(), rss_bytes()
    for i in range(200):
        y = pyooc.conv_forward(pinned_x if i % 2 else x, w, bias=b, padding=1, memory_limit=limit, backend="cuda")
    time.sleep(0.1)
    dev1, rss1 = free(), rss_bytes()
    assert abs(dev1 - dev0) <= 2 * MiB, f"device free memory moved by {(dev0 - dev1) / MiB:.1f} MiB over 200 calls"
    assert rss1 - rss0 <= 16 * MiB, f"RSS grew by {(rss1 - rss0) / MiB:.1f} MiB over 200 calls"
    assert rel_err(y, reference_conv(x, w, b, padding=1)) < TOL


# --------------------------------------------------------------------------------------------
# Injected faults: the right exception, everything released, the next call right


@pytest.mark.gpu
@pytest.mark.parametrize("where, countdown, exc", [
    ("copy", 3, pyooc.CudaError), ("copy", 1, pyooc.CudaError), ("copy", 9, pyooc.CudaError),
    ("conv", 2, pyooc.CudnnError), ("conv", 1, pyooc.CudnnError), ("conv", 5, pyooc.CudnnError),
])
@pytest.mark.parametrize("memory", ["pageable", "pinned"])
def test_injected_fault(rng, where, countdown, exc, memory):
    free = device_free_bytes()
    x_shape, w_shape, geometry = (3, 5, 41, 11), (4, 5, 3, 3), dict(padding=1)
    limit, _ = find_budget(x_shape, w_shape, {"n", "h"}, at_least=True, bias=True, backend="cuda", **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    if memory == "pinned":
        x, w, b = pinned_copy(x), pinned_copy(w), pinned_copy(b)
    x0, w0 = x.copy(), w.copy()
    pyooc.conv_forward(x, w, bias=b, memory_limit=limit, backend="cuda", **geometry)  # warm-up
    chunks = pyooc.last_stats()["chunks"]
    assert chunks >= 6 and chunks >= countdown
    time.sleep(0.1)
    baseline = free()
    try:
        pyooc._native.inject_fault(where, countdown)
        with pytest.raises(exc, match="injected fault") as raised:
            pyooc.conv_forward(x, w, bias=b, memory_limit=limit, backend="cuda", **geometry)
    finally:
        pyooc._native.inject_fault(where, 0)
    assert raised.value.status == INJECTED_FAULT_STATUS[where]
    time.sleep(0.1)
    assert abs(free() - baseline) <= 2 * MiB, "device memory not released after a failed call"
    assert np.array_equal(x, x0) and np.array_equal(w, w0)
    y = np.full(output_shape(x_shape, w_shape, **geometry), np.nan, dtype=np.float32)
    pyooc.conv_forward(x, w, bias=b, out=y, memory_limit=limit, backend="cuda", **geometry)
    assert rel_err(y, reference_conv(x, w, b, **geometry)) < TOL


@pytest.mark.gpu
def test_fault_countdown_beyond_the_call_does_not_fire(rng):
    x, w, b = random_problem(rng, (2, 3, 9, 9), (4, 3, 3, 3), bias=True)
    try:
        pyooc._native.inject_fault("conv", 10**6)
        y = pyooc.conv_forward(x, w, bias=b, backend="cuda")
    finally:
        pyooc._native.inject_fault("conv", 0)
    assert rel_err(y, reference_conv(x, w, b)) < TOL
    pyooc.conv_forward(x, w, bias=b, backend="cuda")  # disarmed: runs


# --------------------------------------------------------------------------------------------
# Pinned arrays


@pytest.mark.gpu
def test_pinned_empty_arrays():
    a = pyooc.pinned_empty((3, 4, 5))
    assert a.shape == (3, 4, 5) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    a[...] = 7.0
    assert (a == 7.0).all()
    b = pyooc.pinned_empty(10, np.float64)
    assert b.shape == (10,) and b.dtype == np.float64
    assert pyooc.pinned_empty((0, 3)).size == 0


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["all", "x", "out", "w+bias"])
def test_pinned_inputs_and_out(rng, which):
    x_shape, w_shape, geometry = (3, 5, 41, 11), (4, 5, 3, 3), dict(padding=1)
    limit, _ = find_budget(x_shape, w_shape, {"n", "h"}, at_least=True, bias=True, backend="cuda", **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    out = np.full(output_shape(x_shape, w_shape, **geometry), np.nan, dtype=np.float32)
    if which in ("all", "x"):
        x = pinned_copy(x)
    if which in ("all", "w+bias"):
        w, b = pinned_copy(w), pinned_copy(b)
    if which in ("all", "out"):
        out = pinned_copy(out)
    direct = {"all": True, "x": "x", "out": False, "w+bias": False}[which]
    run_checked(x, w, bias=b, out=out, memory_limit=limit, backend="cuda", direct=direct, **geometry)


@pytest.mark.gpu
def test_queue_busy_time_is_measured_on_request(rng, monkeypatch):
    """OOC_PROFILE_QUEUES=1 reports device time per queue: each queue did work, none longer than the run."""
    x = rng.standard_normal((8, 16, 64, 64), dtype=np.float32)
    w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
    pyooc.conv_forward(x, w, padding=1, memory_limit="2MiB", backend="cuda")
    assert pyooc.last_stats()["compute_busy_seconds"] == -1  # off by default
    monkeypatch.setenv("OOC_PROFILE_QUEUES", "1")
    y = pyooc.conv_forward(x, w, padding=1, memory_limit="2MiB", backend="cuda")
    stats = pyooc.last_stats()
    assert stats["chunks"] > 1
    for queue in ("h2d", "compute", "d2h"):
        busy = stats[f"{queue}_busy_seconds"]
        assert 0 < busy <= stats["seconds"] * 1.05, (queue, busy, stats["seconds"])
    assert rel_err(y, reference_conv(x, w, padding=1)) < TOL


def test_the_gpu_listed_twice_gives_the_one_device_results(rng):
    """devices=[0, 0]: two pipelines on the one GPU, each under memory_limit; the same results as one."""
    x, w, b = random_problem(rng, (4, 16, 48, 40), (24, 16, 3, 3), bias=True)
    limit = 2 * smallest_budget(x.shape, w.shape, backend="cuda", padding=1)
    one = pyooc.conv_forward(x, w, b, padding=1, memory_limit=limit, backend="cuda")
    spread = pyooc.conv_forward(x, w, b, padding=1, memory_limit=limit, backend="cuda", devices=[0, 0])
    np.testing.assert_array_equal(spread, one)
    dy = rng.standard_normal(one.shape, dtype=np.float32)
    dw_one = pyooc.conv_backward_filter(x, dy, w.shape, padding=1, memory_limit=limit, backend="cuda")
    dw_two = pyooc.conv_backward_filter(x, dy, w.shape, padding=1, memory_limit=limit, backend="cuda",
                                        devices=[0, 0])
    assert rel_err(dw_two, dw_one) < 1e-5


def test_batch_norm_on_the_gpu_listed_twice_gives_the_one_device_results(rng):
    """set_devices([0, 0]): batch norm's statistics pass on both pipelines, one float64 merge, the
    apply pass on both; training (y, statistics, running averages) and backward bit for bit."""
    x = rng.standard_normal((8, 12, 40, 36), dtype=np.float32) * 2
    dy = rng.standard_normal(x.shape, dtype=np.float32)
    scale, shift = rng.standard_normal(12, dtype=np.float32), rng.standard_normal(12, dtype=np.float32)

    def run():
        mean, var = np.zeros(12, np.float32), np.ones(12, np.float32)
        y, saved_mean, saved_invstd = pyooc.batchnorm_forward_training(
            x, scale, shift, running_mean=mean, running_var=var, memory_limit="256KiB", backend="cuda")
        chunks = pyooc.last_stats()["chunks"]
        grads = pyooc.batchnorm_backward(x, dy, scale, saved_mean, saved_invstd, memory_limit="256KiB",
                                         backend="cuda")
        return [y, saved_mean, saved_invstd, mean, var, *grads], chunks

    one, chunks = run()
    assert chunks > 4
    try:
        pyooc.set_devices([0, 0])
        spread, _ = run()
    finally:
        pyooc.set_devices(None)
    for ours, theirs in zip(spread, one):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.skipif(pyooc.device_count() < 2, reason="needs two GPUs (the multi-GPU kind)")
def test_two_gpus_give_the_one_device_results(rng):
    """devices=[0, 1] (and [1, 0]): a convolution's output bit for bit, dw within float32 rounding of
    its two partial sums, batch norm bit for bit; pinned arrays, read by both GPUs' DMA."""
    x, w, b = random_problem(rng, (8, 32, 64, 56), (32, 32, 3, 3), bias=True)
    xp = pyooc.pinned_empty(x.shape)
    xp[...] = x
    limit = 2 * smallest_budget(x.shape, w.shape, backend="cuda", padding=1)
    one = pyooc.conv_forward(xp, w, b, padding=1, memory_limit=limit, backend="cuda")
    dy = rng.standard_normal(one.shape, dtype=np.float32)
    dw_one = pyooc.conv_backward_filter(xp, dy, w.shape, padding=1, memory_limit=limit, backend="cuda")
    for devices in ([0, 1], [1, 0]):
        spread = pyooc.conv_forward(xp, w, b, padding=1, memory_limit=limit, backend="cuda", devices=devices)
        np.testing.assert_array_equal(spread, one)
        dw = pyooc.conv_backward_filter(xp, dy, w.shape, padding=1, memory_limit=limit, backend="cuda",
                                        devices=devices)
        assert rel_err(dw, dw_one) < 1e-5
    y_one, mean_one, invstd_one = pyooc.batchnorm_forward_training(x, b[:32], b[:32], memory_limit="1MiB",
                                                                   backend="cuda")
    try:
        pyooc.set_devices([0, 1])
        y, mean, invstd = pyooc.batchnorm_forward_training(x, b[:32], b[:32], memory_limit="1MiB", backend="cuda")
    finally:
        pyooc.set_devices(None)
    for ours, theirs in ((y, y_one), (mean, mean_one), (invstd, invstd_one)):
        np.testing.assert_array_equal(ours, theirs)


def test_results_are_pinned_and_their_blocks_reused(rng):
    """A result without out= is cut from the pinned cache (pyooc/pinned_cache.py) and its block
    serves the next result once the array is gone; a chain of calls reads the pinned result."""
    import gc

    from test_pinned_cache import leased

    x, w, _ = random_problem(rng, (4, 16, 96, 96), (16, 16, 3, 3))
    before = pyooc.pinned_results()
    assert before["enabled"]
    y1 = pyooc.conv_forward(x, w, padding=1, backend="cuda")
    assert leased(y1)
    y2 = pyooc.conv_forward(y1, w, padding=1, backend="cuda")  # the chain: y1 is this call's pinned input
    assert leased(y2) and not np.shares_memory(y1, y2)
    ref = pyooc.conv_forward(pyooc.conv_forward(x, w, padding=1, backend="host"), w, padding=1, backend="host")
    assert rel_err(y2, ref) < 1e-5
    del y1
    gc.collect()
    y3 = pyooc.conv_forward(x, w, padding=1, backend="cuda")
    assert pyooc.pinned_results()["reused"] > before["reused"]
    del y2, y3


def test_pin_registers_in_place_and_unpin_undoes_it(rng):
    """pin(x) page-locks x where it is: the next call plans it as pinned (no host staging)."""
    x, w, _ = random_problem(rng, (2, 8, 64, 64), (8, 8, 3, 3))
    y = pyooc.pinned_empty((2, 8, 64, 64))
    limit = 4 * smallest_budget(x.shape, w.shape, backend="cuda", padding=1)
    assert pyooc.pin(x) is x
    assert pyooc.pin(x) is x  # twice: once registered
    pyooc.conv_forward(x, w, padding=1, out=y, memory_limit=limit, backend="cuda")
    ref = reference_conv(x, w, padding=1)
    assert rel_err(y, ref) < TOL
    pyooc.pin(w)
    pyooc.conv_forward(x, w, padding=1, out=y, memory_limit=limit, backend="cuda")
    stats = pyooc.last_stats()
    assert stats["gather_seconds"] == 0.0 and stats["scatter_seconds"] == 0.0, "every tensor pinned: direct DMA"
    pyooc.unpin(x)
    pyooc.unpin(w)
    pyooc.conv_forward(x, w, padding=1, out=y, memory_limit=limit, backend="cuda")
    assert rel_err(y, ref) < TOL


@pytest.mark.parametrize("name,tol", [("float16", 1e-3), ("bfloat16", 1e-2)])
def test_half_precision_forward_and_backward_data_on_the_gpu(rng, name, tol):
    """cuDNN in half data with float32 compute, under a budget that splits; dw of half inputs sums
    each chunk's half partial in float32 (cudnnTransformTensor); db of half inputs by the library's
    own reduction into a float32 db (tests/test_half_fused.py tests it further)."""
    import ml_dtypes

    dtype = np.float16 if name == "float16" else ml_dtypes.bfloat16
    x = rng.standard_normal((4, 16, 40, 36)).astype(dtype)
    w = (rng.standard_normal((24, 16, 3, 3)) / 12).astype(dtype)
    # Twice what the hungriest of the four operations needs at least: a half forward or backward
    # data chunk also reserves room for cuDNN's NHWC copies (docs/dtypes.md), so their needs differ.
    y_shape, common = (4, 24, 40, 36), dict(padding=1, dtype=name, backend="cuda")
    limit = 2 * max(needed_budget(lambda m: pyooc.plan_conv_forward(x.shape, w.shape, memory_limit=m, **common)),
                    needed_budget(lambda m: pyooc.plan_conv_backward_data(y_shape, w.shape, x.shape, memory_limit=m,
                                                                          **common)),
                    needed_budget(lambda m: pyooc.plan_conv_backward_filter(x.shape, y_shape, w.shape, memory_limit=m,
                                                                            **common)))
    y = pyooc.conv_forward(x, w, padding=1, memory_limit=limit, backend="cuda")
    assert y.dtype == dtype and pyooc.last_stats()["chunks"] > 1
    ref = reference_conv(x.astype(np.float64), w.astype(np.float64), padding=1)
    assert rel_err(y.astype(np.float64), ref) < tol
    dx = pyooc.conv_backward_data(y, w, x.shape, padding=1, memory_limit=limit, backend="cuda")
    host = pyooc.conv_backward_data(y, w, x.shape, padding=1, backend="host")
    assert rel_err(dx.astype(np.float64), host.astype(np.float64)) < 2 * tol
    dw = pyooc.conv_backward_filter(x, y, w.shape, padding=1, memory_limit=limit, backend="cuda")
    assert dw.dtype == dtype and pyooc.last_stats()["chunks"] > 1
    ref_dw = pyooc.conv_backward_filter(x, y, w.shape, padding=1, backend="host")
    assert rel_err(dw.astype(np.float64), ref_dw.astype(np.float64)) < 4 * tol
    db = pyooc.conv_backward_bias(y, memory_limit=limit, backend="cuda")
    assert db.dtype == dtype
    assert rel_err(db.astype(np.float64), y.astype(np.float64).sum(axis=(0, 2, 3))) < tol


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_half_precision_activations_on_the_gpu(rng, name):
    """cuDNN's activations in half precision; a mode cuDNN lacks (gelu) is refused by name."""
    import ml_dtypes

    dtype = np.float16 if name == "float16" else ml_dtypes.bfloat16
    x = rng.standard_normal((4, 16, 64, 64)).astype(dtype)
    for mode in ("relu", "sigmoid", "tanh"):
        y = pyooc.activation_forward(x, mode, memory_limit=1 << 20, backend="cuda")
        host = pyooc.activation_forward(x, mode, backend="host")
        assert y.dtype == dtype
        assert rel_err(y.astype(np.float64), host.astype(np.float64)) < 1e-2
    with pytest.raises(NotImplementedError, match=f"activation_forward has no {name} kernel"):
        pyooc.activation_forward(x, "gelu", backend="cuda")
