"""The cuda backend's activation, softmax and add_tensor (cuDNN) against float64 references, whole
and split by small budgets, from pageable and pinned memory. Skipped without a GPU."""

import numpy as np
import pytest

import pyooc
from conftest import rel_err
from layers_helpers import (ACTIVATIONS, COEF, poisoned, ref_activation, ref_activation_grad, ref_softmax,
                            ref_softmax_grad, split_set)

pytestmark = pytest.mark.gpu
TOL = 2e-5
LIMITS = [pytest.param(None, id="whole"), pytest.param("64KiB", id="split")]


def rand(rng, shape, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("mode", ACTIVATIONS)
def test_activation_cuda(rng, mode, limit):
    shape = (3, 5, 17, 19, 7)
    x, dy = rand(rng, shape), rand(rng, shape)
    coef = COEF[mode]
    y = pyooc.activation_forward(x, mode, coef=coef, out=poisoned(shape), memory_limit=limit, backend="cuda")
    if limit is not None:
        assert pyooc.last_stats()["plan"].num_chunks > 1
    assert rel_err(y, ref_activation(x, mode, coef)) < TOL
    dx = pyooc.activation_backward(y, dy, x, mode, coef=coef, out=poisoned(shape), memory_limit=limit,
                                   backend="cuda")
    assert rel_err(dx, ref_activation_grad(x, dy, mode, coef)) < 1e-4


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("mode", ["channel", "instance"])
def test_softmax_cuda(rng, mode, log, limit):
    shape = (6, 10, 9, 31)
    x, dy = rand(rng, shape, 4.0), rand(rng, shape)
    y = pyooc.softmax_forward(x, mode=mode, log=log, out=poisoned(shape), memory_limit=limit, backend="cuda")
    plan = pyooc.last_stats()["plan"]
    assert plan.splits["c"] == 1
    if limit is not None:
        assert "n" in split_set(plan)
    assert rel_err(y, ref_softmax(x, mode, log)) < TOL
    dx = pyooc.softmax_backward(y, dy, mode=mode, log=log, out=poisoned(shape), memory_limit=limit, backend="cuda")
    assert rel_err(dx, ref_softmax_grad(y, dy, mode, log)) < 1e-4


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("a_shape, c_shape", [
    ((1, 8, 1, 1), (4, 8, 33, 17)),
    ((4, 8, 33, 17), (4, 8, 33, 17)),
    ((1, 8, 1, 1, 1), (2, 8, 5, 9, 11)),
])
def test_add_tensor_cuda(rng, a_shape, c_shape, limit):
    a, c = rand(rng, a_shape), rand(rng, c_shape)
    ref = 0.5 * a.astype(np.float64) + 2.0 * c
    out = pyooc.add_tensor(a, c, alpha=0.5, beta=2.0, out=poisoned(c_shape), memory_limit=limit, backend="cuda")
    assert rel_err(out, ref) < TOL
    pyooc.add_tensor(a, c, alpha=0.5, beta=2.0, out=c, memory_limit=limit, backend="cuda")
    assert rel_err(c, ref) < TOL


def test_layers_cuda_pinned(rng):
    shape = (4, 6, 32, 32)
    x = pyooc.pinned_empty(shape)
    x[...] = rand(rng, shape)
    y = pyooc.pinned_empty(shape)
    y[...] = np.nan
    pyooc.softmax_forward(x, out=y, memory_limit="64KiB", backend="cuda")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    assert rel_err(y, ref_softmax(x, "channel", False)) < TOL
    pyooc.activation_forward(x, "relu", out=x, memory_limit="64KiB", backend="cuda")
    assert (np.asarray(x) >= 0).all()
