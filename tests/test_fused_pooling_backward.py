"""pooling_activation_conv_backward_data_filter_bias on the host backend: for q = pool(y), y =
act(pre), (dx, dw, db) of dz = act'(pre) * pool_backward(q, dq, y) equal to the float64 references
and to the unfused composition, every pooling mode with overlapping, tiled, gapped and padded
windows, under budgets forcing the fused backward's split kinds (staged and direct DMA); dy and dz
never cross the link; argument errors name the argument."""

import numpy as np
import pytest

import pyooc
from backward_helpers import random_backward
from conftest import host_direct_access, needed_budget, output_shape, rel_err, scan_budget
from fused_helpers import TOL, activated, coef_of, composed_backward, fused_split_set, run_pooled_backward_checked
from test_layers_pool import MODES

POOLS = {  # kernel, stride, padding (per spatial dim, 2D)
    "overlap": ((3, 3), (1, 1), (0, 0)),
    "tiles": ((2, 2), (2, 2), (0, 0)),
    "gapped": ((1, 2), (3, 2), (0, 0)),
    "padded": ((3, 3), (2, 2), (1, 1)),
}


def pool_of(name, mode):
    kernel, stride, padding = POOLS[name]
    return dict(pool_kernel=kernel, pool_stride=stride, pool_padding=padding, pool_mode=mode)


# Activations without flat stretches, so max pooling has no ties (their argmax is then unique).
@pytest.mark.parametrize("activation, pass_pre", [("tanh", False), ("swish", True), ("identity", True)])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pool_name", list(POOLS))
def test_modes_and_windows(rng, pool_name, mode, activation, pass_pre):
    x_shape, w_shape, geometry = (2, 3, 21, 17), (4, 3, 3, 3), dict(padding=1)
    x, w, _ = random_backward(rng, x_shape, w_shape, **geometry)
    pre = rng.standard_normal(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    run_pooled_backward_checked(x, w, pre, rng, activation, pool_of(pool_name, mode), pass_pre=pass_pre, **geometry)


SPLITS = [
    pytest.param("n", "overlap", id="n"),
    pytest.param("c", "tiles", id="c"),
    pytest.param("h", "overlap", id="h-overlapping-windows"),
    pytest.param("h", "gapped", id="h-gapped-windows"),
    pytest.param("w", "tiles", id="w"),
    pytest.param("nch", "overlap", id="n+c+h"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("want, pool_name", SPLITS)
def test_every_split_kind(rng, want, pool_name, direct):
    x_shape = {"n": (7, 2, 12, 10), "c": (1, 23, 8, 8)}.get(want, (3, 5, 60, 14) if "n" in want else (1, 2, 61, 13))
    if want == "w":
        x_shape = (1, 2, 9, 61)
    w_shape, geometry = (4, x_shape[1], 3, 3), dict(padding=1)
    pool = pool_of(pool_name, "max" if len(want) % 2 else "avg")
    y_shape = output_shape(x_shape, w_shape, **geometry)

    def plan_at(limit):
        return pyooc.plan_pooling_activation_conv_backward_data_filter_bias(
            x_shape, y_shape, w_shape, activation="sigmoid", memory_limit=limit, backend="host",
            **{k: v for k, v in pool.items() if k != "pool_mode"}, **geometry)
    start = needed_budget(plan_at)
    limit, planned = scan_budget(plan_at, start, 30 * start, lambda p: fused_split_set(p) == set(want),
                                 f"a split of exactly {want}")
    x, w, _ = random_backward(rng, x_shape, w_shape, **geometry)
    pre = rng.standard_normal(y_shape, dtype=np.float32)
    with host_direct_access(direct):
        _, plan = run_pooled_backward_checked(x, w, pre, rng, "sigmoid", pool, pass_pre=False, memory_limit=limit,
                                              direct=direct, **geometry)
    assert plan.splits == planned.splits


def test_padded_pooling_keeps_its_dims_whole():
    """cuDNN pads a pooling's border only in a dim it sees whole: those dims are never split."""
    def plan_at(limit, pool_padding):
        return pyooc.plan_pooling_activation_conv_backward_data_filter_bias(
            (1, 2, 61, 13), (1, 4, 61, 13), (4, 2, 3, 3), padding=1, pool_kernel=3, pool_stride=2,
            pool_padding=pool_padding, memory_limit=limit, backend="host")
    padded = needed_budget(lambda limit: plan_at(limit, 1))
    plan = plan_at(padded, 1)
    assert plan.splits["h"] == plan.splits["w"] == 1
    assert needed_budget(lambda limit: plan_at(limit, 0)) < padded  # unpadded, h may be split


def test_equals_the_composition_and_moves_less(rng):
    x_shape, w_shape, geometry = (2, 8, 48, 20), (8, 8, 3, 3), dict(padding=1)
    pool = pool_of("tiles", "max")
    x, w, _ = random_backward(rng, x_shape, w_shape, **geometry)
    pre = rng.standard_normal(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    limit = "96KiB"
    (dx, dw, db), plan = run_pooled_backward_checked(x, w, pre, np.random.default_rng(5), "tanh", pool,
                                                     pass_pre=False, memory_limit=limit, **geometry)
    assert plan.num_chunks > 1
    y = activated(pre, "tanh").astype(np.float32)
    kw = dict(stride=pool["pool_stride"], padding=pool["pool_padding"], mode="max", memory_limit=limit, backend="host")
    q = pyooc.pool_forward(y, pool["pool_kernel"], **kw)
    dq = np.random.default_rng(5).standard_normal(q.shape, dtype=np.float32)
    moved = 0
    dy = pyooc.pool_backward(q, dq, y, pool["pool_kernel"], **kw)
    moved += pyooc.last_stats()["bytes_h2d"] + pyooc.last_stats()["bytes_d2h"]
    dz = pyooc.activation_backward(y, dy, pre, "tanh", memory_limit=limit, backend="host")
    moved += pyooc.last_stats()["bytes_h2d"] + pyooc.last_stats()["bytes_d2h"]
    cdx, cdw, cdb, unfused = composed_backward(x, w, dz, memory_limit=limit, **geometry)
    assert rel_err(dx, cdx) < 2 * TOL and rel_err(dw, cdw) < 2 * TOL
    np.testing.assert_allclose(db, cdb, rtol=1e-5, atol=1e-4)
    # unfused: dy out and in again, dz out and in three times, y twice, pre once ...
    assert moved + unfused - (plan.bytes_h2d + plan.bytes_d2h) >= 5 * y.nbytes


def test_argument_errors(rng):
    x, w, _ = random_backward(rng, (1, 2, 8, 8), (3, 2, 3, 3))
    y = rng.standard_normal((1, 3, 6, 6), dtype=np.float32)
    q = pyooc.pool_forward(y, 2, backend="host")
    call = pyooc.pooling_activation_conv_backward_data_filter_bias
    with pytest.raises(ValueError, match="dq has shape"):
        call(x, y, w, q, y, pool_kernel=2, backend="host")
    with pytest.raises(ValueError, match="y has shape"):
        call(x, q, w, q, q, pool_kernel=2, backend="host")
    with pytest.raises(ValueError, match="pre"):
        call(x, q, w, q, y, pool_kernel=2, activation="elu", backend="host")
    with pytest.raises(ValueError, match="pooling mode"):
        call(x, q, w, q, y, pool_kernel=2, pool_mode="median", backend="host")
    with pytest.raises(TypeError):
        call(x, q, w, q, y, backend="host")  # pool_kernel is required
