"""Half precision (numpy's float16, ml_dtypes' bfloat16) for the convolution and its gradients on
the host backend: results in the input dtype against float64 references of the same (exactly
upcast) inputs, within fp16 1e-3 / bf16 1e-2 of the norm, on fresh random inputs with
NaN-poisoned outputs, under budgets from the tightest up; the reductions over every chunk (dw, db)
accumulate in float32, so their error does not grow with the chunk count; plans count two bytes
per element; mixed and unsupported dtypes are refused naming the argument. The cuda backend's
twins are in tests/test_gpu.py."""

import ml_dtypes
import numpy as np
import pytest

import pyooc
from backward_helpers import reference_backward_data, reference_backward_filter
from conftest import needed_budget, reference_conv, rel_err

DTYPES = {"float16": (np.float16, 1e-3), "bfloat16": (ml_dtypes.bfloat16, 1e-2)}
X, W = (3, 6, 17, 15), (8, 6, 3, 3)


def half_inputs(rng, dtype, *shapes, scale=1.0):
    return [(rng.standard_normal(s) * scale).astype(dtype) for s in shapes]


def up(a):
    return np.asarray(a).astype(np.float64)


def budgets(plan_at):
    needed = needed_budget(plan_at)
    return [needed, int(needed * 2.5), None]


@pytest.mark.parametrize("name", DTYPES)
def test_forward(rng, name):
    dtype, tol = DTYPES[name]
    x, w, b = half_inputs(rng, dtype, X, W, W[:1])
    w = (up(w) / 6).astype(dtype)
    ref = reference_conv(up(x), up(w), up(b), padding=1)
    chunks = []
    for limit in budgets(lambda m: pyooc.plan_conv_forward(X, W, bias=True, padding=1, dtype=name, memory_limit=m,
                                                           backend="host")):
        out = np.full(ref.shape, np.nan, dtype)
        y = pyooc.conv_forward(x, w, b, padding=1, out=out, memory_limit=limit, backend="host")
        assert y.dtype == dtype and not np.isnan(up(y)).any()
        assert rel_err(up(y), ref) < tol, (name, limit)
        chunks.append(pyooc.last_stats()["chunks"])
        assert pyooc.last_stats()["plan"].splits["c"] == 1, "the reduction over C stays inside a chunk"
    assert chunks[0] > 1
    fresh = pyooc.conv_forward(x, w, b, padding=1, backend="host")
    assert fresh.dtype == dtype


@pytest.mark.parametrize("name", DTYPES)
def test_backward_data(rng, name):
    dtype, tol = DTYPES[name]
    (w,) = half_inputs(rng, dtype, W, scale=1 / 6)
    (dy,) = half_inputs(rng, dtype, (3, 8, 17, 15))
    ref = reference_backward_data(up(dy), up(w), X, padding=1)
    for limit in budgets(lambda m: pyooc.plan_conv_backward_data(dy.shape, W, X, padding=1, dtype=name,
                                                                 memory_limit=m, backend="host")):
        out = np.full(X, np.nan, dtype)
        dx = pyooc.conv_backward_data(dy, w, X, padding=1, out=out, memory_limit=limit, backend="host")
        assert not np.isnan(up(dx)).any()
        assert rel_err(up(dx), ref) < tol, (name, limit)
        assert pyooc.last_stats()["plan"].splits["k"] == 1, "the reduction over K stays inside a chunk"


@pytest.mark.parametrize("name", DTYPES)
def test_backward_filter_and_bias_accumulate_in_float32(rng, name):
    """dw and db sum over every chunk: at the tightest budget (many chunks) as exact as in one."""
    dtype, tol = DTYPES[name]
    x_shape, w_shape, dy_shape = (8, 3, 40, 36), (4, 3, 3, 3), (8, 4, 38, 34)
    x, dy = half_inputs(rng, dtype, x_shape, dy_shape)
    dw_old = half_inputs(rng, dtype, w_shape)[0]
    ref = 0.5 * reference_backward_filter(up(x), up(dy), w_shape) + 0.25 * up(dw_old)
    limit = needed_budget(lambda m: pyooc.plan_conv_backward_filter(x_shape, dy_shape, w_shape, beta=0.25,
                                                                    dtype=name, memory_limit=m, backend="host"))
    dw = dw_old.copy()
    pyooc.conv_backward_filter(x, dy, w_shape, alpha=0.5, beta=0.25, out=dw, memory_limit=limit, backend="host")
    assert pyooc.last_stats()["chunks"] > 8
    assert dw.dtype == dtype
    # One rounding to the dtype at the end: the same error as the reference rounded once.
    assert rel_err(up(dw), ref) < tol
    assert rel_err(up(dw), ref) <= 2 * rel_err(up(ref.astype(dtype)), ref) + 1e-7
    db = pyooc.conv_backward_bias(dy, memory_limit=needed_budget(
        lambda m: pyooc.plan_conv_backward_bias(dy_shape, dtype=name, memory_limit=m, backend="host")), backend="host")
    ref_db = up(dy).sum(axis=(0, 2, 3))
    assert db.dtype == dtype and rel_err(up(db), ref_db) < tol


@pytest.mark.parametrize("name", DTYPES)
def test_groups_and_same_padding_in_half(rng, name):
    dtype, tol = DTYPES[name]
    x, w = half_inputs(rng, dtype, (2, 6, 11, 12), (6, 1, 2, 4))
    y = pyooc.conv_forward(x, w, padding="same", groups=6, backend="host", memory_limit=4096)
    xp = np.pad(up(x), [(0, 0), (0, 0), (0, 1), (1, 2)])
    ref = np.concatenate([reference_conv(xp[:, g:g + 1], up(w)[g:g + 1]) for g in range(6)], axis=1)
    assert y.shape == x.shape and rel_err(up(y), ref) < tol


@pytest.mark.parametrize("name", DTYPES)
def test_plans_count_two_bytes_per_element(name):
    f32 = pyooc.plan_conv_forward(X, W, backend="host")
    half = pyooc.plan_conv_forward(X, W, dtype=name, backend="host")
    assert half.bytes_h2d * 2 == f32.bytes_h2d and half.bytes_d2h * 2 == f32.bytes_d2h
    assert name in str(half)


@pytest.mark.parametrize("call,exc,pattern", [
    (lambda x, w: pyooc.conv_forward(x, w.astype(np.float32), backend="host"), TypeError,
     r"w must have the dtype of x \(float16\), got float32: mixed dtypes"),
    (lambda x, w: pyooc.conv_forward(x, w, np.zeros(8, np.float32), backend="host"), TypeError,
     r"bias must have the dtype of x \(float16\), got float32"),
    (lambda x, w: pyooc.conv_forward(x.astype(np.float64), w, backend="host"), TypeError,
     r"x must have dtype float32, float16 or bfloat16, got float64"),
    (lambda x, w: pyooc.conv_forward(x, w, out=np.zeros((3, 8, 15, 13), np.float32), backend="host"), TypeError,
     r"out must have dtype float16, got float32"),
    (lambda x, w: pyooc.conv_backward_filter(x, np.zeros((3, 8, 15, 13), ml_dtypes.bfloat16), W, backend="host"),
     TypeError, r"dy must have the dtype of x \(float16\), got bfloat16"),
    (lambda x, w: pyooc.plan_conv_forward(X, W, dtype="int8", backend="host"), TypeError,
     r"dtype must be float32, float16 or bfloat16, got int8"),
    (lambda x, w: pyooc.matmul(x[0, 0], np.ascontiguousarray(x[0, 0].T, np.float32), backend="host"),
     TypeError, r"mat2 must have the dtype of mat1 \(float16\), got float32: mixed dtypes"),
    (lambda x, w: pyooc.matmul(x[0, 0].astype(np.float64), x[0, 0].T.copy(), backend="host"),
     TypeError, r"mat1 must have dtype float32, float16 or bfloat16, got float64 \(pyooc does not convert"),
])
def test_mixed_and_unsupported_dtypes_are_refused(rng, call, exc, pattern):
    x, w = half_inputs(rng, np.float16, X, W)
    with pytest.raises(exc, match=pattern):
        call(x, w)


ACTIVATIONS = {
    "relu": (lambda x: np.maximum(x, 0), lambda x, dy: dy * (x > 0)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda x, dy: dy * (1 / (1 + np.exp(-x))) * (1 - 1 / (1 + np.exp(-x)))),
    "tanh": (np.tanh, lambda x, dy: dy * (1 - np.tanh(x) ** 2)),
    "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), lambda x, dy: dy * np.where(x > 0, 1, np.exp(x))),
}


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("mode", ACTIVATIONS)
def test_activations(rng, name, mode):
    """The element-wise activations in half precision: forward and gradient in the input dtype."""
    dtype, tol = DTYPES[name]
    f, grad = ACTIVATIONS[mode]
    x, dy = half_inputs(rng, dtype, (3, 5, 21, 19), (3, 5, 21, 19))
    limit = needed_budget(lambda m: pyooc.plan_activation_forward(x.shape, dtype=name, memory_limit=m,
                                                                  backend="host"))
    out = np.full(x.shape, np.nan, dtype)
    y = pyooc.activation_forward(x, mode, out=out, memory_limit=limit, backend="host")
    assert y.dtype == dtype and pyooc.last_stats()["chunks"] > 1
    assert rel_err(up(y), f(up(x))) < tol
    limit = needed_budget(lambda m: pyooc.plan_activation_backward(x.shape, mode=mode, dtype=name, memory_limit=m,
                                                                   backend="host"))
    dx = pyooc.activation_backward(y, dy, x, mode, memory_limit=limit, backend="host")
    assert dx.dtype == dtype and rel_err(up(dx), grad(up(x), up(dy))) < tol
    plan = pyooc.plan_activation_forward(x.shape, dtype=name, backend="host")
    assert plan.bytes_h2d == x.size * 2 and plan.bytes_d2h == x.size * 2
