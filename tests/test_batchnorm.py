"""Batch normalization (training, inference, backward) on the host backend (and the GPU, marked)
against float64 numpy formulas, with NaN-poisoned outputs, budgets that force every split (two-pass
plans included), torch's running-statistics semantics and bad input."""

import numpy as np
import pytest

import pyooc
from batchnorm_helpers import check_tiles, ref_backward, ref_training
from conftest import rel_err

TOL = 1e-5


SHAPES = [((8, 3, 5, 7), None), ((8, 3, 5, 7), 4096), ((5, 4, 3, 4, 6), 2048), ((9, 6), 1024),
          ((2, 3, 1000), 3072), ((1, 2, 3, 97), 2048)]


@pytest.mark.parametrize("shape,limit", SHAPES)
def test_training_forward_and_backward(rng, shape, limit):
    c = shape[1]
    x = (rng.standard_normal(shape, dtype=np.float32) * 2 + 5).astype(np.float32)
    scale = rng.standard_normal(c, dtype=np.float32)
    bias = rng.standard_normal(c, dtype=np.float32)
    rm = rng.standard_normal(c, dtype=np.float32)
    rv = (rng.random(c, dtype=np.float32) + 0.5).astype(np.float32)
    rm0, rv0, x0 = rm.copy(), rv.copy(), x.copy()
    out = np.full(shape, np.nan, np.float32)
    y, sm, si = pyooc.batchnorm_forward_training(x, scale, bias, eps=1e-3, momentum=0.2, running_mean=rm,
                                                 running_var=rv, out=out, memory_limit=limit, backend="host")
    assert y is out and (x == x0).all()
    ref_y, mean, var = ref_training(x, scale, bias, 1e-3)
    assert rel_err(y, ref_y) < TOL
    assert rel_err(sm, mean) < TOL
    assert rel_err(si, 1 / np.sqrt(var + 1e-3)) < TOL
    n = x.size // c
    assert rel_err(rm, 0.8 * rm0.astype(np.float64) + 0.2 * mean) < TOL
    assert rel_err(rv, 0.8 * rv0.astype(np.float64) + 0.2 * var * n / (n - 1)) < TOL
    plan = pyooc.last_stats()["plan"]
    assert plan.operation == "batchnorm_forward_training" and plan.passes == 2
    check_tiles(plan, shape)

    dy = rng.standard_normal(shape, dtype=np.float32)
    dx, dscale, dbias = pyooc.batchnorm_backward(x, dy, scale, sm, si, out=np.full(shape, np.nan, np.float32),
                                                 memory_limit=limit, backend="host")
    ref_dx, ref_dscale, ref_dbias = ref_backward(x, dy, scale, sm.astype(np.float64), si.astype(np.float64))
    assert rel_err(dx, ref_dx) < 1e-4  # dx is a difference of O(1) terms: relative to its norm
    assert rel_err(dscale, ref_dscale) < TOL
    assert rel_err(dbias, ref_dbias) < TOL
    assert pyooc.last_stats()["plan"].passes == 2

    mean32, var32 = mean.astype(np.float32), var.astype(np.float32)
    yi = pyooc.batchnorm_forward_inference(x, scale, bias, mean32, var32, eps=1e-3, out=np.full(shape, np.nan, np.float32),
                                           memory_limit=limit, backend="host")
    ref_yi, _, _ = ref_training(x, scale, bias, 1e-3)
    assert rel_err(yi, ref_yi) < TOL
    assert pyooc.last_stats()["plan"].passes == 1


def test_statistics_exact_for_large_mean_under_many_chunks(rng):
    # A large common offset: naive fp32 sum-of-squares would lose the variance; Chan merging does not.
    x = (rng.standard_normal((64, 2, 50), dtype=np.float32) + 1000).astype(np.float32)
    scale, bias = np.ones(2, np.float32), np.zeros(2, np.float32)
    y, sm, si = pyooc.batchnorm_forward_training(x, scale, bias, memory_limit=2048, backend="host")
    assert pyooc.last_stats()["plan"].num_chunks > 8
    _, mean, var = ref_training(x, scale, bias, 1e-5)
    assert rel_err(si, 1 / np.sqrt(var + 1e-5)) < 1e-4


def test_plans_split_and_say_passes():
    plan = pyooc.plan_batchnorm_backward((6, 5, 7, 9), memory_limit=4096, backend="host")
    assert plan.passes == 2 and plan.num_chunks > 4
    assert "2 passes" in str(plan)
    check_tiles(plan, (6, 5, 7, 9))
    plan = pyooc.plan_batchnorm_forward_training((6, 5, 7, 9), memory_limit=1500, backend="host")
    assert plan.splits["n"] == 6 and (plan.splits["c"] > 1 or plan.splits["h"] > 1), str(plan)
    inference = pyooc.plan_batchnorm_forward_inference((6, 5, 7, 9), backend="host")
    assert inference.passes == 1 and inference.num_chunks == 1
    with pytest.raises(MemoryError):
        pyooc.plan_batchnorm_forward_training((6, 5, 7, 9), memory_limit=256, backend="host")


def test_bad_input():
    x = np.zeros((4, 3, 5), np.float32)
    s3 = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"scale must have shape \[3\]"):
        pyooc.batchnorm_forward_training(x, np.ones(4, np.float32), s3, backend="host")
    with pytest.raises(ValueError, match=r"var must have shape \[3\]"):
        pyooc.batchnorm_forward_inference(x, s3, s3, s3, np.ones(2, np.float32), backend="host")
    with pytest.raises(ValueError, match="eps must be positive"):
        pyooc.batchnorm_forward_training(x, s3, s3, eps=0.0, backend="host")
    with pytest.raises(ValueError, match="eps must be positive"):
        pyooc.batchnorm_forward_inference(x, s3, s3, s3, s3, eps=-1.0, backend="host")
    with pytest.raises(TypeError, match="x must have dtype float32"):
        pyooc.batchnorm_forward_training(x.astype(np.float64), s3, s3, backend="host")
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        pyooc.batchnorm_forward_training(np.zeros((3, 4, 5), np.float32).transpose(1, 0, 2), s3, s3, backend="host")
    with pytest.raises(ValueError, match="2 to 5 dimensions"):
        pyooc.batchnorm_forward_training(np.zeros(3, np.float32), s3, s3, backend="host")
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        pyooc.batchnorm_forward_training(np.zeros((1, 3), np.float32), s3, s3, backend="host")
    with pytest.raises(ValueError, match="running_mean and running_var go together"):
        pyooc.batchnorm_forward_training(x, s3, s3, running_mean=s3.copy(), backend="host")
    with pytest.raises(ValueError, match="dy must have x's shape"):
        pyooc.batchnorm_backward(x, np.zeros((4, 3, 6), np.float32), s3, s3, s3, backend="host")
    with pytest.raises(ValueError, match="out has shape"):
        pyooc.batchnorm_forward_training(x, s3, s3, out=np.zeros((4, 3, 4), np.float32), backend="host")


@pytest.mark.gpu
@pytest.mark.parametrize("limit", [None, 1 << 16])
def test_gpu_training_backward_inference(rng, limit):
    shape = (6, 5, 17, 19)
    x = (rng.standard_normal(shape, dtype=np.float32) * 2 + 5).astype(np.float32)
    scale, bias = rng.standard_normal(5, dtype=np.float32), rng.standard_normal(5, dtype=np.float32)
    rm, rv = np.zeros(5, np.float32), np.ones(5, np.float32)
    y, sm, si = pyooc.batchnorm_forward_training(x, scale, bias, running_mean=rm, running_var=rv,
                                                 memory_limit=limit, backend="cuda")
    ref_y, mean, var = ref_training(x, scale, bias, 1e-5)
    assert rel_err(y, ref_y) < TOL
    n = x.size // 5
    assert rel_err(rm, 0.1 * mean) < TOL
    assert rel_err(rv, 0.9 + 0.1 * var * n / (n - 1)) < TOL
    dy = rng.standard_normal(shape, dtype=np.float32)
    dx, dscale, dbias = pyooc.batchnorm_backward(x, dy, scale, sm, si, memory_limit=limit, backend="cuda")
    ref_dx, ref_dscale, ref_dbias = ref_backward(x, dy, scale, sm.astype(np.float64), si.astype(np.float64))
    assert rel_err(dx, ref_dx) < 1e-4
    assert rel_err(dscale, ref_dscale) < TOL and rel_err(dbias, ref_dbias) < TOL
    yi = pyooc.batchnorm_forward_inference(x, scale, bias, mean.astype(np.float32), var.astype(np.float32),
                                           memory_limit=limit, backend="cuda")
    assert rel_err(yi, ref_y) < TOL


@pytest.mark.gpu
def test_gpu_pinned_training(rng):
    shape = (4, 3, 50, 20)
    x = pyooc.pinned_empty(shape, np.float32)
    x[...] = rng.standard_normal(shape, dtype=np.float32) + 3
    scale, bias = rng.standard_normal(3, dtype=np.float32), rng.standard_normal(3, dtype=np.float32)
    out = pyooc.pinned_empty(shape, np.float32)
    out[...] = np.nan
    y, _, _ = pyooc.batchnorm_forward_training(x, scale, bias, out=out, memory_limit=1 << 15, backend="cuda")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    assert rel_err(y, ref_training(x, scale, bias, 1e-5)[0]) < TOL
