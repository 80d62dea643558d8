"""Batch normalization (training, inference, backward) on float16 and bfloat16 x on the host backend:
y, dx in x's dtype within fp16 1e-3 / bf16 1e-2 of float64 references of the same (exactly upcast)
inputs, the statistics, running statistics, dscale and dbias float32 and accumulated in float32 or
wider (so they stay accurate to float32's precision whatever the chunking), NaN-poisoned outputs,
budgets that split n, c and space (two-pass plans), and half the bytes of float32 plans (what is
refused: tests/test_half_layers.py). The cuda backend's twin is marked gpu."""

import ml_dtypes
import numpy as np
import pytest

import pyooc
from batchnorm_helpers import check_tiles, per_channel, ref_backward, ref_training
from conftest import rel_err

DTYPES = {"float16": (np.float16, 1e-3), "bfloat16": (ml_dtypes.bfloat16, 1e-2)}
STATS_TOL = 1e-5  # float32 statistics of exactly representable inputs
SHAPES = [((8, 3, 5, 7), 2048), ((5, 4, 3, 4, 6), 1024), ((300, 6), 1024), ((2, 3, 1000), 1536), ((1, 2, 3, 97), 1024)]


def up(a):
    return np.asarray(a).astype(np.float64)


def params(rng, c):
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    return scale, bias


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("shape,limit", SHAPES)
def test_training_forward_and_backward(rng, name, shape, limit):
    dtype, tol = DTYPES[name]
    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 5).astype(dtype)
    scale, bias = params(rng, c)
    rm, rv = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
    rm0, rv0 = rm.copy(), rv.copy()
    y, sm, si = pyooc.batchnorm_forward_training(x, scale, bias, eps=1e-3, momentum=0.2, running_mean=rm,
                                                 running_var=rv, out=np.full(shape, np.nan, dtype), memory_limit=limit,
                                                 backend="host")
    plan = pyooc.last_stats()["plan"]
    assert plan.passes == 2 and plan.num_chunks > 1
    check_tiles(plan, shape)
    ref_y, mean, var = ref_training(up(x), scale, bias, 1e-3)
    assert y.dtype == dtype and sm.dtype == si.dtype == rm.dtype == np.float32
    assert rel_err(up(y), ref_y) < tol
    assert rel_err(sm, mean) < STATS_TOL and rel_err(si, 1 / np.sqrt(var + 1e-3)) < STATS_TOL
    n = x.size // c
    assert rel_err(rm, 0.8 * up(rm0) + 0.2 * mean) < STATS_TOL
    assert rel_err(rv, 0.8 * up(rv0) + 0.2 * var * n / (n - 1)) < STATS_TOL

    dy = rng.standard_normal(shape).astype(dtype)
    dx, dscale, dbias = pyooc.batchnorm_backward(x, dy, scale, sm, si, out=np.full(shape, np.nan, dtype),
                                                 memory_limit=limit, backend="host")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    ref_dx, ref_dscale, ref_dbias = ref_backward(up(x), up(dy), scale, up(sm), up(si))
    assert dx.dtype == dtype and dscale.dtype == dbias.dtype == np.float32
    assert rel_err(up(dx), ref_dx) < tol
    assert rel_err(dscale, ref_dscale) < 1e-4 and rel_err(dbias, ref_dbias) < 1e-4


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("shape,limit", SHAPES)
def test_inference(rng, name, shape, limit):
    dtype, tol = DTYPES[name]
    c = shape[1]
    x = rng.standard_normal(shape).astype(dtype)
    scale, bias = params(rng, c)
    mean, var = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
    y = pyooc.batchnorm_forward_inference(x, scale, bias, mean, var, eps=1e-4, out=np.full(shape, np.nan, dtype),
                                          memory_limit=limit, backend="host")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    ref = (up(x) - per_channel(mean, x)) / np.sqrt(per_channel(var, x) + 1e-4) * per_channel(scale, x) \
        + per_channel(bias, x)
    assert y.dtype == dtype and rel_err(up(y), ref) < tol


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", ["training", "inference", "backward"])
def test_plans_stream_half_the_bytes(name, op):
    """The tensors' bytes halve; the per-channel statistics and coefficients (float32, a few floats
    per channel and chunk) do not."""
    plan = getattr(pyooc, f"plan_batchnorm_{'forward_' if op != 'backward' else ''}{op}")
    full, halved = plan((8, 16, 32, 32), backend="host"), plan((8, 16, 32, 32), dtype=name, backend="host")
    per_channel_bytes = 4 * 4 * 16 * full.num_chunks  # at most 4 float32 a channel, per chunk
    for f, h in ((full.bytes_h2d, halved.bytes_h2d), (full.bytes_d2h, halved.bytes_d2h)):
        assert 0 <= 2 * h - f <= per_channel_bytes and h < f


@pytest.mark.gpu
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("limit", [None, "64KiB"], ids=["whole", "split"])
def test_half_batchnorm_on_the_gpu(rng, name, limit):
    dtype, tol = DTYPES[name]
    shape = (6, 5, 17, 19)
    x, dy = (rng.standard_normal(shape) * 2 + 3).astype(dtype), rng.standard_normal(shape).astype(dtype)
    scale, bias = params(rng, shape[1])
    y, sm, si = pyooc.batchnorm_forward_training(x, scale, bias, out=np.full(shape, np.nan, dtype),
                                                 memory_limit=limit, backend="cuda")
    ref_y, mean, var = ref_training(up(x), scale, bias, 1e-5)
    assert rel_err(up(y), ref_y) < tol and rel_err(sm, mean) < STATS_TOL
    dx, dscale, dbias = pyooc.batchnorm_backward(x, dy, scale, sm, si, out=np.full(shape, np.nan, dtype),
                                                 memory_limit=limit, backend="cuda")
    ref_dx, ref_dscale, ref_dbias = ref_backward(up(x), up(dy), scale, up(sm), up(si))
    assert rel_err(up(dx), ref_dx) < tol and rel_err(dscale, ref_dscale) < 1e-4 and rel_err(dbias, ref_dbias) < 1e-4
    var = (1 / si.astype(np.float64) ** 2 - 1e-5).astype(np.float32)  # the statistics are float32, as cuDNN takes them
    y = pyooc.batchnorm_forward_inference(x, scale, bias, sm, var, memory_limit=limit,
                                          backend="cuda")
    assert rel_err(up(y), ref_y) < tol
