"""Softmax on channels-last arrays (host backend): libooc is handed the memory as it is, each
position's channels one contiguous row ([N * space, C, 1] for mode "channel"; [N, space, C] for
"instance", which reduces over a whole sample in any order), so no layout copy is made. Forward and backward, log or not, every dtype,
budgets that split the rows unevenly, NaN-poisoned channels-last out=, against float64 references
computed on the channels-first values; the result has x's layout; inputs are never written."""

import numpy as np
import pytest

import pyooc
from conftest import needed_budget, rel_err
from layout_helpers import DTYPES, channels_last, empty_channels_last, is_channels_last, up

SHAPES = [(3, 7, 5, 4), (2, 5, 3, 4, 3)]  # 2-D and 3-D, C and space uneven against any split


def softmax_ref(x, mode, log):
    axes = (1,) if mode == "channel" else tuple(range(1, x.ndim))
    z = x - x.max(axis=axes, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axes, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def softmax_grad_ref(y, dy, mode, log):
    axes = (1,) if mode == "channel" else tuple(range(1, y.ndim))
    if log:
        return dy - np.exp(y) * dy.sum(axis=axes, keepdims=True)
    return y * (dy - (dy * y).sum(axis=axes, keepdims=True))


def budgets(shape, mode, dtype):
    """The tightest budget both directions fit, then looser ones, up to unsplit."""
    space = int(np.prod(shape[2:]))
    rows = (shape[0] * space, shape[1], 1) if mode == "channel" else (shape[0], space, shape[1])  # the memory's
    needed = max(needed_budget(lambda limit: plan(rows, mode=mode, dtype=dtype, memory_limit=limit, backend="host"))
                 for plan in (pyooc.plan_softmax_forward, pyooc.plan_softmax_backward))
    return [needed, int(needed * 2.5), None]


@pytest.mark.parametrize("shape", SHAPES, ids=["2d", "3d"])
@pytest.mark.parametrize("mode", ["channel", "instance"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("name", DTYPES)
def test_softmax_forward_and_backward_in_channels_last(rng, shape, mode, log, name):
    dtype, tol = DTYPES[name]
    x = channels_last((rng.standard_normal(shape) * 3).astype(dtype))
    dy = channels_last(rng.standard_normal(shape).astype(dtype))
    x_before, dy_before = x.copy(), dy.copy()
    for limit in budgets(shape, mode, str(np.dtype(dtype))):
        y = empty_channels_last(shape, dtype)
        got = pyooc.softmax_forward(x, mode=mode, log=log, out=y, memory_limit=limit, backend="host")
        assert got is y
        assert rel_err(up(y), softmax_ref(up(x), mode, log)) < tol
        fresh = pyooc.softmax_forward(x, mode=mode, log=log, memory_limit=limit, backend="host")
        assert is_channels_last(fresh) and fresh.dtype == dtype
        assert np.array_equal(up(fresh), up(y))
        dx = empty_channels_last(shape, dtype)
        pyooc.softmax_backward(y, dy, mode=mode, log=log, out=dx, memory_limit=limit, backend="host")
        assert rel_err(up(dx), softmax_grad_ref(up(y), up(dy), mode, log)) < max(tol, 1e-5) * 10
    assert np.array_equal(up(x), up(x_before)) and np.array_equal(up(dy), up(dy_before))


def test_channels_last_in_place(rng):
    x = channels_last(rng.standard_normal((2, 6, 4, 5)).astype(np.float32))
    want = softmax_ref(up(x), "channel", False)
    assert pyooc.softmax_forward(x, out=x, backend="host", memory_limit="1KiB") is x
    assert rel_err(up(x), want) < 1e-6


def test_one_call_takes_one_layout(rng):
    y = rng.standard_normal((2, 6, 4, 5)).astype(np.float32)
    with pytest.raises(ValueError, match=r"dy is channels-first \(C-contiguous\) but y is channels-last"):
        pyooc.softmax_backward(channels_last(y), y.copy(), backend="host")
    with pytest.raises(ValueError, match="out must be channels-last, as the inputs are"):
        pyooc.softmax_forward(channels_last(y), out=np.empty_like(y), backend="host")
