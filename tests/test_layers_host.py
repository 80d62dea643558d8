"""Host-backend numerics of activation, softmax and add_tensor against float64 references: every
mode, 1D/2D/3D, budgets that force each split kind (with uneven edge chunks), staged and direct
DMA, in place, NaN-poisoned outputs, and what the plans report."""

import contextlib

import numpy as np
import pytest

import pyooc
from conftest import host_direct_access, rel_err
from layers_helpers import (ACTIVATIONS, COEF, budget_where, poisoned, ref_activation, ref_activation_grad,
                            ref_softmax, ref_softmax_grad, split_set)

TOL = 1e-5
SHAPES = [pytest.param((3, 4, 13), id="1d"), pytest.param((2, 3, 7, 5), id="2d"),
          pytest.param((2, 2, 3, 5, 4), id="3d")]


def rand(rng, shape, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --------------------------------------------------------------------------------------------
# activation


@pytest.mark.parametrize("mode", ACTIVATIONS)
@pytest.mark.parametrize("shape", SHAPES)
def test_activation_forward_backward(rng, mode, shape):
    x, dy = rand(rng, shape), rand(rng, shape)
    coef = COEF[mode]
    y = pyooc.activation_forward(x, mode, coef=coef, out=poisoned(shape), backend="host")
    assert rel_err(y, ref_activation(x, mode, coef)) < TOL
    dx = pyooc.activation_backward(y, dy, x, mode, coef=coef, out=poisoned(shape), backend="host")
    assert not np.isnan(dx).any()
    assert rel_err(dx, ref_activation_grad(x, dy, mode, coef)) < TOL


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("mode", ["elu", "swish", "clipped_relu"])
def test_activation_split_uneven(rng, mode, direct):
    shape = (3, 5, 7, 11)  # 1155 elements: a prime-ish total, so the last chunk is short
    x, dy = rand(rng, shape), rand(rng, shape)
    coef = COEF[mode]
    limit = 3 * 2 * 256 * 2
    plan = pyooc.plan_activation_forward(shape, memory_limit=limit, backend="host")
    assert split_set(plan) == {"w"} and plan.num_chunks > 4
    assert 1155 % plan.tiles["w"] != 0
    with host_direct_access() if direct else contextlib.nullcontext():
        y = pyooc.activation_forward(x, mode, coef=coef, out=poisoned(shape), memory_limit=limit, backend="host")
        assert pyooc.last_stats()["plan"].num_chunks == plan.num_chunks
        dx = pyooc.activation_backward(y, dy, x, mode, coef=coef, out=poisoned(shape), memory_limit=2 * limit,
                                       backend="host")
        assert pyooc.last_stats()["plan"].num_chunks > 1
    assert rel_err(y, ref_activation(x, mode, coef)) < TOL
    assert rel_err(dx, ref_activation_grad(x, dy, mode, coef)) < TOL


def test_activation_in_place(rng):
    x = rand(rng, (4, 3, 9, 9))
    ref = ref_activation(x, "tanh", None)
    x_dy = rand(rng, x.shape)
    grad_ref = ref_activation_grad(x, x_dy, "tanh", None)
    y = pyooc.activation_forward(x.copy(), "tanh", backend="host")
    out = x.copy()
    got = pyooc.activation_forward(out, "tanh", out=out, memory_limit=4096, backend="host")
    assert got is out and rel_err(out, ref) < TOL
    dy = x_dy.copy()
    pyooc.activation_backward(y, dy, x, "tanh", out=dy, memory_limit=8192, backend="host")
    assert rel_err(dy, grad_ref) < TOL


def test_activation_inputs_untouched(rng):
    x = rand(rng, (2, 3, 4))
    keep = x.copy()
    pyooc.activation_forward(x, "relu", backend="host")
    np.testing.assert_array_equal(x, keep)


# --------------------------------------------------------------------------------------------
# softmax


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("mode", ["channel", "instance"])
@pytest.mark.parametrize("shape", SHAPES + [pytest.param((5, 7), id="nc")])
def test_softmax_forward_backward(rng, shape, mode, log):
    x, dy = rand(rng, shape, 4.0), rand(rng, shape)
    y = pyooc.softmax_forward(x, mode=mode, log=log, out=poisoned(shape), backend="host")
    assert rel_err(y, ref_softmax(x, mode, log)) < TOL
    dx = pyooc.softmax_backward(y, dy, mode=mode, log=log, out=poisoned(shape), backend="host")
    assert rel_err(dx, ref_softmax_grad(y, dy, mode, log)) < 1e-4


@pytest.mark.parametrize("want", [frozenset({"n"}), frozenset({"n", "w"})], ids=["n", "n+space"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
def test_softmax_channel_splits(rng, want, log):
    shape = (5, 6, 7, 9)
    x, dy = rand(rng, shape, 4.0), rand(rng, shape)
    budget = budget_where(lambda b: pyooc.plan_softmax_forward(shape, mode="channel", memory_limit=b,
                                                                backend="host"), want)
    assert budget is not None
    y = pyooc.softmax_forward(x, mode="channel", log=log, out=poisoned(shape), memory_limit=budget, backend="host")
    plan = pyooc.last_stats()["plan"]
    assert split_set(plan) - {"k"} == want and plan.splits["c"] == 1
    assert rel_err(y, ref_softmax(x, "channel", log)) < TOL
    dx = pyooc.softmax_backward(y, dy, mode="channel", log=log, out=poisoned(shape), memory_limit=budget,
                                backend="host")
    assert pyooc.last_stats()["plan"].splits["c"] == 1 and pyooc.last_stats()["plan"].num_chunks > 1
    assert rel_err(dx, ref_softmax_grad(y, dy, "channel", log)) < 1e-4


def test_softmax_instance_splits_only_n(rng):
    shape = (7, 3, 4, 5)
    x = rand(rng, shape, 4.0)
    y = pyooc.softmax_forward(x, mode="instance", out=poisoned(shape), memory_limit=3 * 2 * 256, backend="host")
    plan = pyooc.last_stats()["plan"]
    assert split_set(plan) == {"n"} and plan.num_chunks == 7
    assert rel_err(y, ref_softmax(x, "instance", False)) < TOL


def test_softmax_instance_too_large_says_so():
    with pytest.raises(MemoryError, match="one instance"):
        pyooc.plan_softmax_forward((2, 64, 32, 32), mode="instance", memory_limit="64KiB", backend="host")
    with pytest.raises(MemoryError, match="c .for one position."):
        pyooc.plan_softmax_forward((2, 100000, 4), mode="channel", memory_limit="64KiB", backend="host")


def test_softmax_in_place(rng):
    x = rand(rng, (3, 5, 6))
    ref = ref_softmax(x, "channel", True)
    pyooc.softmax_forward(x, log=True, out=x, memory_limit=2048, backend="host")
    assert rel_err(x, ref) < TOL


# --------------------------------------------------------------------------------------------
# add_tensor


BROADCASTS = [
    pytest.param((1, 4, 1, 1), (3, 4, 5, 6), id="bias2d"),
    pytest.param((3, 4, 5, 6), (3, 4, 5, 6), id="same"),
    pytest.param((1, 1, 5, 1), (2, 3, 5, 7), id="h-only"),
    pytest.param((2, 1, 1, 1, 4), (2, 3, 2, 3, 4), id="3d-n-w"),
    pytest.param((1, 3, 1), (4, 3, 10), id="1d"),
]


@pytest.mark.parametrize("a_shape, c_shape", BROADCASTS)
@pytest.mark.parametrize("limit", [None, 3 * 4 * 256], ids=["whole", "split"])
def test_add_tensor(rng, a_shape, c_shape, limit):
    a, c = rand(rng, a_shape), rand(rng, c_shape)
    keep = c.copy()
    ref = 1.5 * a.astype(np.float64) - 0.25 * c
    out = pyooc.add_tensor(a, c, alpha=1.5, beta=-0.25, out=poisoned(c_shape), memory_limit=limit, backend="host")
    assert rel_err(out, ref) < TOL
    np.testing.assert_array_equal(c, keep)
    if limit is not None and np.prod(c_shape) > 100:
        assert pyooc.last_stats()["plan"].num_chunks > 1
    default = pyooc.add_tensor(a, c, backend="host")
    assert rel_err(default, a.astype(np.float64) + c) < TOL
    pyooc.add_tensor(a, c, alpha=1.5, beta=-0.25, out=c, memory_limit=limit, backend="host")
    assert rel_err(c, ref) < TOL


def test_add_tensor_in_place_beta_zero_never_reads_c(rng):
    a = rand(rng, (1, 3, 1, 1))
    c = poisoned((2, 3, 4, 4))
    pyooc.add_tensor(a, c, beta=0.0, out=c, memory_limit=1024, backend="host")
    assert rel_err(c, np.broadcast_to(a, c.shape)) < TOL


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
def test_add_tensor_split_every_dim(rng, direct):
    a, c = rand(rng, (1, 5, 1, 7)), rand(rng, (3, 5, 20, 7))
    plan = pyooc.plan_add_tensor(a.shape, c.shape, memory_limit=3 * 3 * 256, backend="host")
    assert {"n", "c", "h"} <= split_set(plan)
    with host_direct_access() if direct else contextlib.nullcontext():
        out = pyooc.add_tensor(a, c, out=poisoned(c.shape), memory_limit=3 * 3 * 256, backend="host")
    assert rel_err(out, a.astype(np.float64) + c) < TOL


def test_layer_plans_report():
    plan = pyooc.plan_softmax_backward((4, 8, 16, 16), mode="channel", memory_limit="16KiB", backend="host")
    assert plan.operation == "softmax_backward"
    assert plan.peak_device_bytes <= plan.memory_limit
    assert plan.bytes_h2d == 2 * 4 * 8 * 256 * 4 and plan.bytes_d2h == 4 * 8 * 256 * 4
    assert "softmax_backward" in str(plan)
    boxes = plan.chunks
    assert len(boxes) == plan.num_chunks and all(ch["c"] == (0, 8) for ch in boxes)


def test_activation_traits_give_each_modes_coef_and_gradient_source():
    # leaky_relu's coef defaults to torch's negative_slope; gelu takes none; only relu, sigmoid and
    # tanh take their gradient from y alone.
    x = np.linspace(-3, 3, 61, dtype=np.float32).reshape(1, 61)
    leaky = pyooc.activation_forward(x, "leaky_relu", backend="host")
    np.testing.assert_allclose(leaky, ref_activation(x, "leaky_relu", 0.01), rtol=1e-6, atol=1e-7)
    with pytest.raises(TypeError, match="coef must be a real number"):
        pyooc.activation_forward(x, "leaky_relu", coef="steep", backend="host")
    from pyooc._loader import load_native
    native = load_native()
    assert native.activation_traits("leaky_relu") == ("negative_slope", 0.01, False)
    assert native.activation_traits("gelu") == ("", 0.0, False)
    assert native.activation_traits("clipped_relu") == ("ceiling", None, False)
    assert [m for m in ACTIVATIONS if native.activation_traits(m)[2]] == ["relu", "sigmoid", "tanh"]
