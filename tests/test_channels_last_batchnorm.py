"""Batch norm on channels-last arrays (host backend): libooc is handed x's memory as the
[N * space, C] rows it is (per channel over every row: the same statistics, the same count for
the unbiased running variance), so no layout copy is made. Training (batch statistics, running
averages updated in place), inference and the backward, every dtype, budgets that split the rows
and the channels unevenly, NaN-poisoned channels-last out=, against float64 references on the
logical arrays; the results have x's layout; inputs are never written."""

import numpy as np
import pytest

import pyooc
from conftest import needed_budget, rel_err
from layout_helpers import DTYPES, channels_last, empty_channels_last, is_channels_last, up

SHAPES = [(3, 7, 5, 4), (2, 5, 3, 4, 3)]
EPS = 1e-5


def budgets(shape, dtype):
    rows = (int(np.prod(shape)) // shape[1], shape[1])  # the memory's rows, as the call hands them over
    plans = (pyooc.plan_batchnorm_forward_training, pyooc.plan_batchnorm_forward_inference,
             pyooc.plan_batchnorm_backward)
    needed = max(needed_budget(lambda limit: plan(rows, dtype=dtype, memory_limit=limit, backend="host"))
                 for plan in plans)
    return [needed, int(needed * 2.5), None]


def stats_ref(x):
    axes = (0,) + tuple(range(2, x.ndim))
    return x.mean(axis=axes), x.var(axis=axes), axes


def per_channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


@pytest.mark.parametrize("shape", SHAPES, ids=["2d", "3d"])
@pytest.mark.parametrize("name", DTYPES)
def test_batch_norm_in_channels_last(rng, shape, name):
    dtype, tol = DTYPES[name]
    c = shape[1]
    x = channels_last((rng.standard_normal(shape) * 2 + 1).astype(dtype))
    dy = channels_last(rng.standard_normal(shape).astype(dtype))
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean0, var0 = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
    x_before, dy_before = x.copy(), dy.copy()
    xd = up(x)
    mean, var, axes = stats_ref(xd)
    count = xd.size // c
    xhat = (xd - per_channel(mean, x.ndim)) / np.sqrt(per_channel(var, x.ndim) + EPS)
    y_ref = xhat * per_channel(scale, x.ndim) + per_channel(bias, x.ndim)
    for limit in budgets(shape, str(np.dtype(dtype))):
        running_mean, running_var = mean0.copy(), var0.copy()
        y = empty_channels_last(shape, dtype)
        got, saved_mean, saved_invstd = pyooc.batchnorm_forward_training(
            x, scale, bias, momentum=0.1, running_mean=running_mean, running_var=running_var, out=y,
            memory_limit=limit, backend="host")
        assert got is y
        assert rel_err(up(y), y_ref) < tol
        assert rel_err(saved_mean, mean) < 1e-5 and rel_err(saved_invstd, 1 / np.sqrt(var + EPS)) < 1e-5
        assert rel_err(running_mean, 0.9 * mean0 + 0.1 * mean) < 1e-5
        assert rel_err(running_var, 0.9 * var0 + 0.1 * var * count / (count - 1)) < 1e-5

        fresh = pyooc.batchnorm_forward_inference(x, scale, bias, mean0, var0, memory_limit=limit, backend="host")
        assert is_channels_last(fresh) and fresh.dtype == dtype
        inf_ref = (xd - per_channel(mean0, x.ndim)) / np.sqrt(per_channel(var0, x.ndim) + EPS) * \
            per_channel(scale, x.ndim) + per_channel(bias, x.ndim)
        assert rel_err(up(fresh), inf_ref) < tol

        dx = empty_channels_last(shape, dtype)
        _, dscale, dbias = pyooc.batchnorm_backward(x, dy, scale, saved_mean, saved_invstd, out=dx,
                                                    memory_limit=limit, backend="host")
        g = up(dy)
        dbias_ref = g.sum(axis=axes)
        dscale_ref = (g * xhat).sum(axis=axes)
        dx_ref = per_channel(scale / np.sqrt(var + EPS), x.ndim) / count * (
            count * g - per_channel(dbias_ref, x.ndim) - xhat * per_channel(dscale_ref, x.ndim))
        assert rel_err(up(dx), dx_ref) < max(tol, 1e-5) * 10
        assert rel_err(dscale, dscale_ref) < 1e-4 and rel_err(dbias, dbias_ref) < 1e-4
    assert np.array_equal(up(x), up(x_before)) and np.array_equal(up(dy), up(dy_before))


def test_one_call_takes_one_layout(rng):
    x = rng.standard_normal((2, 6, 4, 5)).astype(np.float32)
    ones = np.ones(6, np.float32)
    with pytest.raises(ValueError, match=r"dy is channels-first \(C-contiguous\) but x is channels-last"):
        pyooc.batchnorm_backward(channels_last(x), x.copy(), ones, ones, ones, backend="host")
    with pytest.raises(ValueError, match="out must be channels-last, as the inputs are"):
        pyooc.batchnorm_forward_inference(channels_last(x), ones, ones, ones, ones, out=np.empty_like(x),
                                          backend="host")
