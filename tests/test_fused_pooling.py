"""conv_bias_activation_pooling_forward on the host backend: equal to the float64 reference and to
the unfused composition (conv_bias_activation_forward, then pool_forward) for every pooling mode,
overlapping, gapped and padded windows, under budgets forcing every split kind of its planner
(n, k, c and each pooled spatial dim; uneven edges; staged and direct DMA); no window straddles two
chunks; y never crosses the link; argument errors name the argument."""

import numpy as np
import pytest

import pyooc
from conftest import host_direct_access, needed_budget, output_shape, scan_budget
from fused_helpers import (ACTIVATIONS, TOL, activation_err, check_pooling_chunks, coef_of,
                           expected_pooling_traffic, fused_split_set, random_forward, reference_bias_activation)
from test_layers_pool import MODES, ref_pool

POOLS = {  # kernel, stride, padding per spatial rank
    "overlap": ((3, 3, 3), (2, 2, 2), (1, 1, 1)),
    "tiles": ((2, 2, 2), (2, 2, 2), (0, 0, 0)),
    "gapped": ((2, 1, 2), (3, 2, 3), (1, 0, 0)),
}


def pool_args(name, spatial):
    kernel, stride, padding = POOLS[name]
    return dict(pool_kernel=kernel[:spatial], pool_stride=stride[:spatial], pool_padding=padding[:spatial])


def run_checked(x, w, b, z, activation, mode, pool, *, alpha2=0.0, memory_limit=None, direct=False, **geometry):
    """The fused call into a NaN-poisoned out, checked against the float64 reference and its chunk
    list, stats against the plan. Returns (out, plan)."""
    y_ref, pre = reference_bias_activation(x, w, b, z, activation, 1.0, alpha2, **geometry)
    ref = ref_pool(y_ref, pool["pool_kernel"], pool["pool_stride"], pool["pool_padding"], mode)
    before = [a.copy() for a in (x, w, b) + ((z,) if z is not None else ())]
    out = np.full(ref.shape, np.nan, dtype=np.float32)
    got = pyooc.conv_bias_activation_pooling_forward(
        x, w, b, z=z, alpha2=alpha2, activation=activation, coef=coef_of(activation), pool_mode=mode, out=out,
        memory_limit=memory_limit, backend="host", **pool, **geometry)
    assert got is out and not np.isnan(out).any(), "pooled outputs never written"
    err = activation_err(out, ref, ref_pool(pre, pool["pool_kernel"], pool["pool_stride"], pool["pool_padding"],
                                            mode))
    assert err < TOL, f"relative error {err:.3e}"
    for a, a0 in zip((x, w, b) + ((z,) if z is not None else ()), before):
        assert np.array_equal(a, a0), "an input was written"
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.operation == "conv_bias_activation_pooling_forward" and plan.fused
    check_pooling_chunks(plan, pool["pool_kernel"], pool["pool_stride"], pool["pool_padding"])
    h2d, d2h = expected_pooling_traffic(plan, direct=direct, bias=b is not None, beta=alpha2 if z is not None else 0)
    assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (h2d, d2h)
    if not direct:
        assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (plan.bytes_h2d, plan.bytes_d2h)
    assert stats["bytes_d2h"] == out.nbytes, "only the pooled result crosses back"
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes <= plan.memory_limit
    return out, plan


@pytest.mark.parametrize("pool_name", list(POOLS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x_shape, w_shape, geometry", [
    pytest.param((2, 3, 17), (4, 3, 3), dict(padding=1), id="1d"),
    pytest.param((2, 3, 13, 11), (5, 3, 3, 3), dict(padding=1, dilation=(1, 2)), id="2d"),
    pytest.param((1, 2, 9, 8, 7), (3, 2, 3, 3, 3), dict(padding=1), id="3d"),
])
def test_modes_and_windows_equal_reference_and_composition(rng, x_shape, w_shape, geometry, mode, pool_name):
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    pool = pool_args(pool_name, len(x_shape) - 2)
    out, _ = run_checked(x, w, b, z, "relu", mode, pool, alpha2=0.5, **geometry)
    y = pyooc.conv_bias_activation_forward(x, w, b, z=z, alpha2=0.5, backend="host", **geometry)
    composed = pyooc.pool_forward(y, pool["pool_kernel"], stride=pool["pool_stride"], padding=pool["pool_padding"],
                                  mode=mode, backend="host")
    np.testing.assert_allclose(out, composed, rtol=1e-5, atol=1e-6)


SPLITS = [
    pytest.param((9, 1, 12), (1, 1, 3), dict(padding=1), "overlap", "n", id="n"),
    pytest.param((1, 1, 12), (13, 1, 3), dict(padding=1), "overlap", "k", id="k"),
    pytest.param((1, 23, 6), (1, 23, 3), dict(padding=1), "tiles", "c", id="c"),
    pytest.param((1, 1, 203), (1, 1, 3), dict(padding=1), "overlap", "w", id="1d-w-overlapping-windows"),
    pytest.param((1, 1, 211), (1, 1, 3), dict(padding=1), "gapped", "w", id="1d-w-gapped-windows"),
    pytest.param((1, 1, 201, 7), (1, 1, 3, 6), dict(padding=(1, 0)), "tiles", "h", id="2d-h"),
    pytest.param((1, 1, 6, 201), (1, 1, 3, 3), dict(padding=(0, 1), stride=(1, 2)), "overlap", "w", id="2d-w"),
    pytest.param((1, 1, 103, 4, 4), (1, 1, 3, 3, 3), dict(padding=(1, 0, 0)), "overlap", "d", id="3d-d"),
    pytest.param((3, 5, 41, 9), (4, 5, 3, 3), dict(padding=1), "overlap", "nkch", id="2d-n+k+c+h"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("x_shape, w_shape, geometry, pool_name, want", SPLITS)
def test_every_split_kind(rng, x_shape, w_shape, geometry, pool_name, want, direct):
    pool = pool_args(pool_name, len(x_shape) - 2)

    def plan_at(limit):
        return pyooc.plan_conv_bias_activation_pooling_forward(x_shape, w_shape, z=True, alpha2=0.5,
                                                               memory_limit=limit, backend="host", **pool, **geometry)
    start = needed_budget(plan_at)
    limit, planned = scan_budget(plan_at, start, 30 * start, lambda p: fused_split_set(p) == set(want),
                                 f"a split of exactly {want}")
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    activation = ACTIVATIONS[sum(map(ord, want)) % len(ACTIVATIONS)]
    mode = MODES[len(want) % len(MODES)]
    with host_direct_access(direct):
        _, plan = run_checked(x, w, b, z, activation, mode, pool, alpha2=0.5, memory_limit=limit, direct=direct,
                              **geometry)
    assert plan.splits == planned.splits and fused_split_set(plan) == set(want)


def test_smallest_budget_and_fewer_bytes(rng):
    x_shape, w_shape, geometry = (2, 8, 40, 24), (8, 8, 3, 3), dict(padding=1)
    pool = pool_args("tiles", 2)
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)

    def plan_at(limit):
        return pyooc.plan_conv_bias_activation_pooling_forward(x_shape, w_shape, memory_limit=limit, backend="host",
                                                               **pool, **geometry)
    limit = needed_budget(plan_at)
    _, plan = run_checked(x, w, b, None, "relu", "max", pool, memory_limit=limit, **geometry)
    assert plan.peak_device_bytes == limit and plan.num_chunks > 1
    with pytest.raises(MemoryError):
        pyooc.conv_bias_activation_pooling_forward(x, w, b, memory_limit=limit - 1, backend="host", **pool,
                                                   **geometry)
    # Under a budget that splits both, the composition writes y back and reads it again to pool it.
    fused = pyooc.plan_conv_bias_activation_pooling_forward(x_shape, w_shape, memory_limit="64KiB", backend="host",
                                                            **pool, **geometry)
    unfused = pyooc.plan_conv_bias_activation_forward(x_shape, w_shape, memory_limit="64KiB", backend="host",
                                                      **geometry)
    assert fused.num_chunks > 1 and unfused.num_chunks > 1
    y_bytes = 4 * int(np.prod(output_shape(x_shape, w_shape, **geometry)))
    saved = unfused.bytes_h2d + unfused.bytes_d2h + y_bytes - (fused.bytes_h2d + fused.bytes_d2h)
    assert saved >= 1.5 * y_bytes, (saved, y_bytes)


def test_argument_errors(rng):
    x, w, b, z = random_forward(rng, (1, 2, 8, 8), (3, 2, 3, 3))
    call = pyooc.conv_bias_activation_pooling_forward
    with pytest.raises(TypeError):
        call(x, w, b, backend="host")  # pool_kernel is required
    with pytest.raises(ValueError, match="pooling mode"):
        call(x, w, b, pool_kernel=2, pool_mode="median", backend="host")
    with pytest.raises(ValueError, match="pool_kernel"):
        call(x, w, b, pool_kernel=(2, 2, 2), backend="host")
    with pytest.raises(ValueError, match="padding"):
        call(x, w, b, pool_kernel=2, pool_padding=2, backend="host")
    with pytest.raises(ValueError, match="out has shape"):
        call(x, w, b, pool_kernel=2, out=np.empty((1, 3, 6, 6), np.float32), backend="host")
    with pytest.raises(ValueError, match="needs z"):
        call(x, w, b, pool_kernel=2, alpha2=1.0, backend="host")
