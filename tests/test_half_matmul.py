"""Half precision (numpy's float16, ml_dtypes' bfloat16) for matmul, linear_forward and
linear_backward on the host backend (the cuda backend's twins are marked gpu): results in the input
dtype against float64 references of the same (exactly upcast) inputs, within fp16 1e-3 / bf16 1e-2
of the norm, NaN-poisoned outputs, budgets that split M, N and K with uneven edges. A split K sums
in a float32 device tile, so it rounds no more than an unsplit call (compared error to error);
plans stream two bytes an element; mixed dtypes are a TypeError naming the argument."""

import ml_dtypes
import numpy as np
import pytest

import pyooc
from conftest import rel_err
from layers_helpers import poisoned

DTYPES = {"float16": (np.float16, 1e-3), "bfloat16": (ml_dtypes.bfloat16, 1e-2)}
M, K, N = 37, 301, 29  # no power of two: every split has an uneven edge
WHOLE = 64 << 20


def half(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def up(a):
    return np.asarray(a).astype(np.float64)


def splitting_budget(name, m=M, k=K, n=N, bias=False):
    """The largest budget (halving from 1 MiB) whose plan splits M, N and K alike."""
    budget = 1 << 20
    while budget > 256:
        plan = pyooc.plan_matmul((m, k), (k, n), bias=bias, dtype=name, memory_limit=budget, backend="host")
        if all(plan.splits[d] > 1 for d in ("n", "k", "c")):
            return budget
        budget //= 2
    raise AssertionError("no budget splits M, N and K")


def check(got, dtype, ref, tol):
    assert got.dtype == dtype
    assert not np.isnan(up(got)).any()
    err = rel_err(up(got), ref)
    assert err < tol
    return err


@pytest.mark.parametrize("name", DTYPES)
def test_matmul_split_k_rounds_no_more_than_unsplit(rng, name):
    dtype, tol = DTYPES[name]
    a, b = half(rng, (M, K), dtype), half(rng, (K, N), dtype)
    ref = up(a) @ up(b)
    whole = pyooc.matmul(a, b, out=poisoned((M, N), dtype), memory_limit=WHOLE, backend="host")
    assert pyooc.last_stats()["plan"].num_chunks == 1
    whole_err = check(whole, dtype, ref, tol)
    budget = splitting_budget(name)
    split = pyooc.matmul(a, b, out=poisoned((M, N), dtype), memory_limit=budget, backend="host")
    plan = pyooc.last_stats()["plan"]
    assert plan.splits["c"] > 2 and plan.peak_device_bytes <= budget
    assert [s for s in plan.slots if s["name"] == "float32 c"], plan.slots
    split_err = check(split, dtype, ref, tol)
    # A partial sum rounded to half per K chunk would add about the result's own rounding each time.
    assert split_err <= 1.05 * whole_err, (split_err, whole_err)


@pytest.mark.parametrize("name", DTYPES)
def test_matmul_alpha_beta_over_split_k(rng, name):
    dtype, tol = DTYPES[name]
    a, b, c0 = half(rng, (M, K), dtype), half(rng, (K, N), dtype), half(rng, (M, N), dtype)
    out = c0.copy()
    got = pyooc.matmul(a, b, alpha=2.0, beta=-0.5, out=out, memory_limit=splitting_budget(name), backend="host")
    assert got is out
    check(out, dtype, 2.0 * (up(a) @ up(b)) - 0.5 * up(c0), tol)


@pytest.mark.parametrize("name", DTYPES)
def test_linear_forward_and_backward(rng, name):
    dtype, tol = DTYPES[name]
    x, w, bias = half(rng, (M, K), dtype), half(rng, (N, K), dtype), half(rng, N, dtype)
    budget = splitting_budget(name, bias=True)
    y = pyooc.linear_forward(x, w, bias, out=poisoned((M, N), dtype), memory_limit=budget, backend="host")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    check(y, dtype, up(x) @ up(w).T + up(bias), tol)
    dy = half(rng, (M, N), dtype)
    # dx = dy @ w, dw = dy.T @ x and db = ones @ dy, each in several chunks.
    dx, dw, db = pyooc.linear_backward(x, w, dy, memory_limit=2048, backend="host")
    assert pyooc.last_stats()["plan"].num_chunks > 1  # db's
    check(dx, dtype, up(dy) @ up(w), tol)
    check(dw, dtype, up(dy).T @ up(x), tol)
    check(db, dtype, up(dy).sum(axis=0), tol)


@pytest.mark.parametrize("name", DTYPES)
def test_plans_count_two_bytes_an_element(name):
    f32 = pyooc.plan_matmul((M, K), (K, N), bias=True, memory_limit=WHOLE, backend="host")
    h = pyooc.plan_matmul((M, K), (K, N), bias=True, dtype=name, memory_limit=WHOLE, backend="host")
    assert 2 * h.bytes_h2d == f32.bytes_h2d and 2 * h.bytes_d2h == f32.bytes_d2h
    lin = pyooc.plan_linear_forward((M, K), (N, K), bias=True, dtype=name, memory_limit=WHOLE, backend="host")
    assert lin.bytes_h2d == h.bytes_h2d
    # Under a budget that splits K, the float32 tile is counted inside the budget.
    budget = splitting_budget(name)
    split = pyooc.plan_matmul((M, K), (K, N), dtype=name, memory_limit=budget, backend="host")
    acc = [s for s in split.slots if s["name"] == "float32 c"]
    assert acc and acc[0]["bytes"] >= 4 * split.tiles["n"] * split.tiles["k"]
    assert split.peak_device_bytes <= budget


def test_mixed_and_unsupported_dtypes_are_refused(rng):
    a16 = np.zeros((2, 3), np.float16)
    with pytest.raises(TypeError, match=r"mat2 must have the dtype of mat1 \(float16\), got float32"):
        pyooc.matmul(a16, np.zeros((3, 4), np.float32), backend="host")
    with pytest.raises(TypeError, match=r"weight must have the dtype of input \(float16\), got bfloat16"):
        pyooc.linear_forward(a16, np.zeros((4, 3), ml_dtypes.bfloat16), backend="host")
    with pytest.raises(TypeError, match=r"bias must have the dtype of input \(float16\), got float32"):
        pyooc.linear_forward(a16, np.zeros((4, 3), np.float16), np.zeros(4, np.float32), backend="host")
    with pytest.raises(TypeError, match=r"grad_output must have the dtype of input \(float16\), got float32"):
        pyooc.linear_backward(a16, np.zeros((4, 3), np.float16), np.zeros((2, 4), np.float32), backend="host")
    with pytest.raises(TypeError, match=r"out must have dtype float16"):
        pyooc.matmul(a16, np.zeros((3, 4), np.float16), out=np.zeros((2, 4), np.float32), backend="host")
    with pytest.raises(TypeError, match="dtype must be"):
        pyooc.plan_matmul((2, 3), (3, 4), dtype="float64")
    inputs = a16.copy()
    pyooc.matmul(a16, np.ones((3, 4), np.float16), backend="host")
    assert np.array_equal(a16, inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", DTYPES)
def test_matmul_and_linear_gpu(rng, name):
    dtype, tol = DTYPES[name]
    m, k, n = 300, 1000, 200
    a, b = half(rng, (m, k), dtype), half(rng, (k, n), dtype)
    ref = up(a) @ up(b)
    whole = pyooc.matmul(a, b, out=poisoned((m, n), dtype), backend="cuda")
    whole_err = check(whole, dtype, ref, tol)
    split = pyooc.matmul(a, b, out=poisoned((m, n), dtype), memory_limit=1 << 18, backend="cuda")
    assert pyooc.last_stats()["plan"].splits["c"] > 1
    assert check(split, dtype, ref, tol) <= 1.1 * whole_err
    c0 = half(rng, (m, n), dtype)
    out = c0.copy()
    pyooc.matmul(a, b, alpha=2.0, beta=0.5, out=out, memory_limit=1 << 18, backend="cuda")
    check(out, dtype, 2.0 * ref + 0.5 * up(c0), tol)
    x, w, bias = half(rng, (257, 129), dtype), half(rng, (65, 129), dtype), half(rng, 65, dtype)
    y = pyooc.linear_forward(x, w, bias, out=poisoned((257, 65), dtype), memory_limit=1 << 16, backend="cuda")
    check(y, dtype, up(x) @ up(w).T + up(bias), tol)
    dy = half(rng, (257, 65), dtype)
    dx, dw, db = pyooc.linear_backward(x, w, dy, memory_limit=1 << 14, backend="cuda")
    check(dx, dtype, up(dy) @ up(w), tol)
    check(dw, dtype, up(dy).T @ up(x), tol)
    check(db, dtype, up(dy).sum(axis=0), tol)
