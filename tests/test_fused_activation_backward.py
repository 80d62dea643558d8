"""activation_conv_backward_data_filter_bias on the host backend: for y = act(pre), (dx, dw, db) of
dz = act'(pre) * dy equal to the float64 references and to the unfused pyooc composition
(activation_backward, then conv_backward_data_filter_bias), every activation, with the activation's
input and (where y alone gives the gradient) without it, under budgets forcing the fused backward's
split kinds (staged and direct DMA); dz never crosses the link: dy, y (and pre) cross once each."""

import numpy as np
import pytest

import pyooc
from backward_helpers import random_backward
from conftest import host_direct_access, needed_budget, rel_err, scan_budget
from fused_helpers import (ACTIVATIONS, TOL, coef_of, composed_backward, fused_split_set, activated,
                           run_fused_backward_checked)

FROM_Y = ("identity", "relu", "sigmoid", "tanh")  # gradients y alone gives

SPLITS = [
    pytest.param((2, 3, 9, 11), (5, 3, 3, 3), dict(padding=1), "", id="2d-whole"),
    pytest.param((7, 9, 8), (3, 9, 8), dict(), "nc", id="n+c"),
    pytest.param((1, 2, 203), (2, 2, 5), dict(padding=3, stride=2, dilation=3), "w", id="1d-w-carried"),
    pytest.param((2, 4, 41, 5, 4), (3, 4, 3, 3, 3), dict(padding=1, stride=(2, 1, 1)), "ncd", id="3d-n+c+d"),
]


def budget_for(x_shape, w_shape, want, activation, pass_pre, **geometry):
    """The first budget splitting exactly `want` (None: the default budget, for "")."""
    if not want:
        return None
    dy_shape = pyooc.conv_forward(np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32), backend="host",
                                  **geometry).shape

    def plan_at(limit):
        return pyooc.plan_activation_conv_backward_data_filter_bias(
            x_shape, dy_shape, w_shape, activation=activation, coef=coef_of(activation), pre=pass_pre,
            memory_limit=limit, backend="host", **geometry)
    start = needed_budget(plan_at)
    limit, _ = scan_budget(plan_at, start, 20 * start, lambda plan: fused_split_set(plan) == set(want),
                           f"a split of exactly {want}")
    return limit


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS)
def test_every_activation_and_split(rng, activation, x_shape, w_shape, geometry, want):
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    pre = rng.standard_normal(dy.shape, dtype=np.float32)
    for pass_pre in (True, False) if activation in FROM_Y else (True,):
        limit = budget_for(x_shape, w_shape, want, activation, pass_pre, **geometry)
        direct = pass_pre and activation in ("relu", "elu", "tanh")
        with host_direct_access(direct):
            (dx, dw, db), plan = run_fused_backward_checked(x, w, dy, memory_limit=limit, direct=direct,
                                                            activation=activation, pre=pre, pass_pre=pass_pre,
                                                            **geometry)
        assert fused_split_set(plan) == set(want)
        assert plan.y_inputs == (1 if activation == "identity" else 3 if pass_pre else 2)


@pytest.mark.parametrize("activation", ["relu", "swish"])
def test_equals_the_composition_and_moves_less(rng, activation):
    x_shape, w_shape, geometry = (2, 8, 48, 20), (8, 8, 3, 3), dict(padding=1)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    pre = rng.standard_normal(dy.shape, dtype=np.float32)
    y = activated(pre, activation).astype(np.float32)
    limit = "64KiB"
    pass_pre = activation == "swish"
    (dx, dw, db), plan = run_fused_backward_checked(x, w, dy, memory_limit=limit, activation=activation, pre=pre,
                                                    pass_pre=pass_pre, **geometry)
    assert plan.num_chunks > 1
    dz = pyooc.activation_backward(y, dy, pre, activation, coef=coef_of(activation), memory_limit=limit,
                                   backend="host")
    stats = pyooc.last_stats()
    act_bytes = stats["bytes_h2d"] + stats["bytes_d2h"]
    cdx, cdw, cdb, unfused = composed_backward(x, w, dz, memory_limit=limit, **geometry)
    assert rel_err(dx, cdx) < 2 * TOL and rel_err(dw, cdw) < 2 * TOL
    np.testing.assert_allclose(db, cdb, rtol=1e-5, atol=1e-4)
    # unfused: y, dy (and pre where the gradient reads it) in and dz out, then dz in three times (7
    # y-sized tensors, 6 for relu); fused: dy, y and pre (or not) in once: 4 saved either way; the x
    # halo rows of the two may differ a little
    saved = act_bytes + unfused - (plan.bytes_h2d + plan.bytes_d2h)
    assert act_bytes == (4 if pass_pre else 3) * dy.nbytes
    assert saved >= 3.8 * dy.nbytes


def test_argument_errors(rng):
    x, w, dy = random_backward(rng, (1, 2, 8, 8), (3, 2, 3, 3))
    y = np.maximum(dy, 0)
    call = pyooc.activation_conv_backward_data_filter_bias
    with pytest.raises(ValueError, match="pre"):
        call(x, dy, w, y, activation="elu", backend="host")
    with pytest.raises(ValueError, match="y has shape"):
        call(x, dy, w, y[:, :, :3].copy(), backend="host")
    with pytest.raises(ValueError, match="pre has shape"):
        call(x, dy, w, y, pre=x, backend="host")
    with pytest.raises(ValueError, match="identity"):
        call(x, dy, w, y, activation="mish", backend="host")
    with pytest.raises(ValueError, match="out overlaps y"):
        call(x, dy, w, y, out=(np.empty_like(x), y.reshape(-1)[:w.size].reshape(w.shape), np.empty(3, np.float32)),
             backend="host")
    with pytest.raises(ValueError, match="pre"):
        pyooc.plan_activation_conv_backward_data_filter_bias(x.shape, dy.shape, w.shape, activation="swish",
                                                             backend="host")
