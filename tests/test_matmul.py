"""matmul, linear_forward and linear_backward on the host backend (and the GPU, marked) against
float64 numpy, with NaN-poisoned outputs, budgets that force every split, plans and bad input."""

import numpy as np
import pytest

import pyooc
from conftest import rel_err

TOL = 1e-5


def ref_matmul(a, b):
    return np.asarray(a, np.float64) @ np.asarray(b, np.float64)


def check_plan_tiles(plan, m, n, k):
    """Every c element is produced by one chain of chunks over K (first..last, each K index once)."""
    covered = np.zeros((m, n), np.int32)
    next_k = {}
    for ch in plan.chunks:
        key = (ch["m"], ch["n"])
        assert ch["k"][0] == next_k.get(key, 0)
        assert ch["first"] == (ch["k"][0] == 0)
        assert ch["last"] == (ch["k"][1] == k)
        next_k[key] = ch["k"][1]
        if ch["last"]:
            covered[ch["m"][0]:ch["m"][1], ch["n"][0]:ch["n"][1]] += 1
    assert (covered == 1).all()
    assert plan.peak_device_bytes <= plan.memory_limit


@pytest.mark.parametrize("shape,limit", [((7, 5, 9), None), ((37, 29, 23), 4096), ((64, 300, 17), 2048),
                                         ((1, 1000, 1), 2048), ((130, 3, 70), 3072)])
def test_matmul_matches_float64(rng, shape, limit):
    m, k, n = shape
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a0, b0 = a.copy(), b.copy()
    out = np.full((m, n), np.nan, np.float32)
    c = pyooc.matmul(a, b, out=out, memory_limit=limit, backend="host")
    assert c is out
    assert rel_err(c, ref_matmul(a, b)) < TOL
    assert (a == a0).all() and (b == b0).all()
    plan = pyooc.last_stats()["plan"]
    assert plan.operation == "matmul"
    check_plan_tiles(plan, m, n, k)


def test_matmul_alpha_beta_accumulates_over_split_k(rng):
    a = rng.standard_normal((40, 257), dtype=np.float32)
    b = rng.standard_normal((257, 31), dtype=np.float32)
    c0 = rng.standard_normal((40, 31), dtype=np.float32)
    out = c0.copy()
    pyooc.matmul(a, b, alpha=0.5, beta=-2.0, out=out, memory_limit=4096, backend="host")
    plan = pyooc.last_stats()["plan"]
    assert plan.splits["c"] > 1, str(plan)
    assert rel_err(out, 0.5 * ref_matmul(a, b) - 2.0 * c0.astype(np.float64)) < TOL


def test_plan_matmul_tiny_budget_splits_every_dimension():
    plan = pyooc.plan_matmul((200, 300), (300, 100), memory_limit=3 * 3 * 256 * 2, backend="host")
    assert plan.splits["n"] > 1 and plan.splits["k"] > 1 and plan.splits["c"] > 1, str(plan)
    check_plan_tiles(plan, 200, 100, 300)
    assert "accumulates" in str(plan)
    whole = pyooc.plan_matmul((20, 30), (30, 10), backend="host", memory_limit="1MiB")
    assert whole.num_chunks == 1


def test_linear_forward_and_backward(rng):
    x = rng.standard_normal((45, 33), dtype=np.float32)
    w = rng.standard_normal((21, 33), dtype=np.float32)
    bias = rng.standard_normal(21, dtype=np.float32)
    y = pyooc.linear_forward(x, w, bias, memory_limit=3072, backend="host")
    assert rel_err(y, ref_matmul(x, w.T) + bias) < TOL
    plan = pyooc.plan_linear_forward(x.shape, w.shape, bias=True, memory_limit=3072, backend="host")
    assert plan.num_chunks > 1
    dy = rng.standard_normal((45, 21), dtype=np.float32)
    dx, dw, db = pyooc.linear_backward(x, w, dy, memory_limit=3072, backend="host")
    assert rel_err(dx, ref_matmul(dy, w)) < TOL
    assert rel_err(dw, ref_matmul(dy.T, x)) < TOL
    assert rel_err(db, dy.astype(np.float64).sum(axis=0)) < TOL
    assert pyooc.linear_backward(x, w, dy, bias=False, backend="host")[2] is None


def test_linear_backward_writes_out(rng):
    x = rng.standard_normal((45, 33), dtype=np.float32)
    w = rng.standard_normal((21, 33), dtype=np.float32)
    dy = rng.standard_normal((45, 21), dtype=np.float32)
    out = (np.full(x.shape, np.nan, np.float32), np.full(w.shape, np.nan, np.float32), np.full(21, np.nan, np.float32))
    got = pyooc.linear_backward(x, w, dy, out=out, memory_limit=3072, backend="host")
    assert all(g is o for g, o in zip(got, out))
    assert rel_err(out[0], ref_matmul(dy, w)) < TOL and rel_err(out[1], ref_matmul(dy.T, x)) < TOL
    assert rel_err(out[2], dy.astype(np.float64).sum(axis=0)) < TOL
    dx, dw, db = pyooc.linear_backward(x, w, dy, bias=False, out=(out[0], out[1], None), backend="host")
    assert dx is out[0] and dw is out[1] and db is None
    with pytest.raises(ValueError, match="out's db must be an array when bias=True and None when bias=False"):
        pyooc.linear_backward(x, w, dy, out=(out[0], out[1], None), backend="host")
    with pytest.raises(TypeError, match=r"out must be a tuple \(dx, dw, db\)"):
        pyooc.linear_backward(x, w, dy, out=out[0], backend="host")
    with pytest.raises(ValueError, match="out overlaps input"):
        pyooc.linear_backward(x, w, dy, out=(x, out[1], out[2]), backend="host")


def test_matmul_bad_input():
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        pyooc.matmul(a, np.zeros((4, 5), np.float32), backend="host")
    with pytest.raises(ValueError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        pyooc.linear_forward(a, np.zeros((5, 4), np.float32), backend="host")
    with pytest.raises(TypeError, match="mat1 must have dtype float32"):
        pyooc.matmul(a.astype(np.float64), np.zeros((3, 5), np.float32), backend="host")
    with pytest.raises(ValueError, match="mat2 must be C-contiguous"):
        pyooc.matmul(a, np.zeros((5, 3), np.float32).T, backend="host")
    with pytest.raises(ValueError, match="mat1 must be a matrix"):
        pyooc.matmul(np.zeros(3, np.float32), np.zeros((3, 5), np.float32), backend="host")
    with pytest.raises(ValueError, match="beta != 0 needs out="):
        pyooc.matmul(a, np.zeros((3, 5), np.float32), beta=1.0, backend="host")
    with pytest.raises(ValueError, match="out has shape"):
        pyooc.matmul(a, np.zeros((3, 5), np.float32), out=np.zeros((2, 4), np.float32), backend="host")
    with pytest.raises(ValueError, match="bias must have shape"):
        pyooc.linear_forward(a, np.zeros((5, 3), np.float32), np.zeros(4, np.float32), backend="host")
    with pytest.raises(MemoryError):
        pyooc.matmul(a, np.zeros((3, 5), np.float32), memory_limit=256, backend="host")


@pytest.mark.gpu
@pytest.mark.parametrize("limit", [None, 1 << 20])
def test_matmul_gpu_full_fp32(rng, limit):
    # Inputs whose TF32 rounding would show: a product accurate to 1e-5 proves no TF32.
    m, k, n = 300, 1000, 200
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = pyooc.matmul(a, b, memory_limit=limit, backend="cuda")
    assert rel_err(c, ref_matmul(a, b)) < TOL
    if limit:
        assert pyooc.last_stats()["plan"].splits["c"] > 1 or pyooc.last_stats()["plan"].num_chunks > 1
    c0 = rng.standard_normal((m, n), dtype=np.float32)
    out = c0.copy()
    pyooc.matmul(a, b, alpha=2.0, beta=0.5, out=out, memory_limit=limit, backend="cuda")
    assert rel_err(out, 2.0 * ref_matmul(a, b) + 0.5 * c0.astype(np.float64)) < TOL


@pytest.mark.gpu
def test_linear_gpu(rng):
    x = rng.standard_normal((257, 129), dtype=np.float32)
    w = rng.standard_normal((65, 129), dtype=np.float32)
    bias = rng.standard_normal(65, dtype=np.float32)
    y = pyooc.linear_forward(x, w, bias, memory_limit=1 << 17, backend="cuda")
    assert rel_err(y, ref_matmul(x, w.T) + bias) < TOL
    dy = rng.standard_normal((257, 65), dtype=np.float32)
    dx, dw, db = pyooc.linear_backward(x, w, dy, memory_limit=1 << 17, backend="cuda")
    assert rel_err(dx, ref_matmul(dy, w)) < TOL
    assert rel_err(dw, ref_matmul(dy.T, x)) < TOL
    assert rel_err(db, dy.astype(np.float64).sum(axis=0)) < TOL


@pytest.mark.gpu
def test_matmul_gpu_pinned_direct_dma(rng):
    # Pinned inputs and output go by DMA straight between the caller's memory and the device slots.
    a = pyooc.pinned_empty((129, 300), np.float32)
    b = pyooc.pinned_empty((300, 77), np.float32)
    a[...] = rng.standard_normal(a.shape, dtype=np.float32)
    b[...] = rng.standard_normal(b.shape, dtype=np.float32)
    out = pyooc.pinned_empty((129, 77), np.float32)
    out[...] = np.nan
    pyooc.matmul(a, b, out=out, memory_limit=1 << 17, backend="cuda")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    assert rel_err(out, ref_matmul(a, b)) < TOL
