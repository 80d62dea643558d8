"""conv_backward_data_filter_bias on the host backend: (dx, dw, db) equal to the three float64
references and to the unfused pyooc composition (conv_backward_data + _filter + _bias), under
budgets that force every split kind of its planner (n, c, each spatial dimension with the dx rows two
tiles share carried on the device; uneven edges; staged and direct DMA), the smallest budget; dy
crosses the link exactly once; argument errors name the argument."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyooc
from backward_helpers import random_backward
from conftest import expand, host_direct_access, output_shape, rel_err
from fused_helpers import (TOL, bias_grad_err, composed_backward, find_fused_backward_budget, fused_split_set,
                           plan_fused_backward, run_fused_backward_checked, smallest_fused_backward_budget)

GEOMETRIES = [
    pytest.param((2, 3, 17), (4, 3, 3), dict(stride=2, padding=1), id="1d"),
    pytest.param((2, 3, 9, 11), (5, 3, 3, 3), dict(padding=1, dilation=(1, 2)), id="2d"),
    pytest.param((2, 2, 10, 7), (3, 2, 1, 2), dict(stride=(3, 4), padding=(0, 1)), id="2d-stride-beyond-kernel"),
    pytest.param((1, 2, 6, 7, 8), (3, 2, 3, 3, 3), dict(padding=(1, 0, 2), stride=(1, 2, 1)), id="3d"),
]


@pytest.mark.parametrize("x_shape, w_shape, geometry", GEOMETRIES)
def test_equals_references_and_composition(rng, x_shape, w_shape, geometry):
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    (dx, dw, db), _ = run_fused_backward_checked(x, w, dy, **geometry)
    cdx, cdw, cdb, _ = composed_backward(x, w, dy, **geometry)
    assert rel_err(dx, cdx) < 2 * TOL and rel_err(dw, cdw) < 2 * TOL and bias_grad_err(db, dy) < TOL
    np.testing.assert_allclose(db, cdb, rtol=1e-5, atol=1e-4)


# Every dimension not named is 1 (or its split impossible), so the scan finds the wanted split.
SPLITS = [
    pytest.param((9, 1, 40), (2, 1, 3), dict(padding=1), "n", id="n"),
    pytest.param((1, 11, 8), (2, 11, 8), dict(), "c", id="c"),
    pytest.param((7, 9, 8), (3, 9, 8), dict(), "nc", id="n+c"),
    pytest.param((1, 1, 203), (2, 1, 5), dict(padding=2), "w", id="1d-w"),
    pytest.param((1, 1, 211), (2, 1, 5), dict(padding=3, stride=2, dilation=3), "w", id="1d-w-stride-dilation"),
    pytest.param((1, 2, 203), (2, 2, 1), dict(stride=3), "w", id="1d-w-stride-beyond-kernel"),
    pytest.param((1, 1, 203), (2, 1, 2), dict(stride=5, padding=1, dilation=2), "w", id="1d-w-gaps-between-reaches"),
    pytest.param((1, 2, 91), (3, 2, 1), dict(padding=3), "w", id="1d-w-padding-wider-than-kernel"),
    pytest.param((1, 1, 201, 6), (2, 1, 3, 6), dict(padding=(1, 0)), "h", id="2d-h"),
    pytest.param((1, 1, 4, 201), (2, 1, 4, 3), dict(padding=(0, 2), stride=(1, 2)), "w", id="2d-w"),
    pytest.param((1, 1, 101, 3, 3), (2, 1, 3, 3, 3), dict(padding=(1, 0, 0)), "d", id="3d-d"),
    pytest.param((1, 1, 3, 101, 3), (2, 1, 3, 3, 3), dict(padding=(0, 1, 0), dilation=(1, 2, 1)), "h", id="3d-h"),
    pytest.param((1, 1, 3, 3, 101), (2, 1, 3, 3, 3), dict(padding=(0, 0, 1), stride=(1, 1, 2)), "w", id="3d-w"),
    pytest.param((3, 5, 61, 6), (4, 5, 3, 3), dict(padding=1), "nch", id="2d-n+c+h"),
    pytest.param((2, 4, 41, 5, 4), (3, 4, 3, 3, 3), dict(padding=1, stride=(2, 1, 1)), "ncd", id="3d-n+c+d"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS)
def test_every_split_kind(rng, x_shape, w_shape, geometry, want, direct):
    limit, planned = find_fused_backward_budget(x_shape, w_shape, set(want), uneven=True, **geometry)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    with host_direct_access(direct):
        _, plan = run_fused_backward_checked(x, w, dy, memory_limit=limit, direct=direct, **geometry)
    assert fused_split_set(plan) == set(want), plan.splits
    assert plan.splits == planned.splits and plan.tiles == planned.tiles
    spatial = len(w_shape) - 2
    for d, name in enumerate("dhw"[3 - spatial:]):
        if name in want:  # dx rows are carried exactly when neighbouring tiles' reaches overlap
            span = (w_shape[2 + d] - 1) * expand(geometry.get("dilation", 1), spatial)[d] + 1
            assert (plan.scratch_bytes > 0) == (span > expand(geometry.get("stride", 1), spatial)[d])


def test_smallest_budget_runs(rng):
    x_shape, w_shape, geometry = (2, 3, 31, 13), (4, 3, 3, 3), dict(padding=1)
    limit = smallest_fused_backward_budget(x_shape, w_shape, **geometry)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    _, plan = run_fused_backward_checked(x, w, dy, memory_limit=limit, **geometry)
    assert plan.peak_device_bytes == limit and plan.num_chunks > 1
    with pytest.raises(MemoryError, match="memory_limit"):
        pyooc.conv_backward_data_filter_bias(x, dy, w, memory_limit=limit - 1, backend="host", **geometry)


def test_dy_crosses_once_against_three(rng):
    """The composition moves dy three times (once per gradient, plus halos); the fused call once."""
    x_shape, w_shape, geometry = (2, 8, 48, 20), (8, 8, 3, 3), dict(padding=1)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    limit = "64KiB"
    (dx, dw, db), plan = run_fused_backward_checked(x, w, dy, memory_limit=limit, **geometry)
    assert plan.num_chunks > 1
    fused = plan.bytes_h2d + plan.bytes_d2h
    cdx, cdw, cdb, unfused = composed_backward(x, w, dy, memory_limit=limit, **geometry)
    # dy twice less; the x halo rows a spatial split adds may differ between the two by a little
    assert unfused - fused >= 1.9 * dy.nbytes
    assert rel_err(dx, cdx) < 2 * TOL and rel_err(dw, cdw) < 2 * TOL
    np.testing.assert_allclose(db, cdb, rtol=1e-5, atol=1e-4)


def test_plan_twin():
    x_shape, w_shape, geometry = (2, 4, 60, 9), (6, 4, 3, 3), dict(padding=1)
    plan = plan_fused_backward(x_shape, w_shape, memory_limit="24KiB", **geometry)
    assert plan.operation == "conv_backward_data_filter_bias" and plan.fused
    y_shape = output_shape(x_shape, w_shape, **geometry)
    assert plan.bytes_d2h == 4 * (np.prod(x_shape) + np.prod(w_shape) + w_shape[0])
    assert plan.bytes_h2d >= 4 * (np.prod(y_shape) + np.prod(x_shape) + np.prod(w_shape))
    assert plan.kept_bytes >= 4 * (np.prod(w_shape) + w_shape[0])
    assert "conv_backward_data_filter_bias" in str(plan) and "kept" in str(plan)
    assert plan.peak_device_bytes <= plan.memory_limit


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_problems(rng, data):
    spatial = data.draw(st.integers(1, 3))
    n, c, k = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    dilation = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    padding = [data.draw(st.integers(0, 2)) for _ in range(spatial)]
    stride = [data.draw(st.integers(1, 4)) for _ in range(spatial)]
    inp = [data.draw(st.integers(max(1, d * (kk - 1) + 1 - 2 * p), (60, 14, 7)[spatial - 1]))
           for kk, d, p in zip(kernel, dilation, padding)]
    geometry = dict(stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))
    x_shape, w_shape = (n, c, *inp), (k, c, *kernel)
    smallest = smallest_fused_backward_budget(x_shape, w_shape, **geometry)
    limit = int(smallest * (1 + 3 * data.draw(st.floats(0.0, 1.0))))
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    direct = data.draw(st.booleans())
    with host_direct_access(direct):
        run_fused_backward_checked(x, w, dy, memory_limit=limit, direct=direct, **geometry)


def test_out_and_argument_errors(rng):
    x, w, dy = random_backward(rng, (1, 2, 8, 8), (3, 2, 3, 3))
    call = pyooc.conv_backward_data_filter_bias
    out = (np.empty_like(x), np.empty_like(w), np.empty(3, np.float32))
    got = call(x, dy, w, out=out, backend="host")
    assert all(a is b for a, b in zip(got, out))
    with pytest.raises(ValueError, match="dy"):
        call(x, dy[:, :, :5], w, backend="host")
    with pytest.raises(ValueError, match="dy"):
        call(x, dy, w, padding=1, backend="host")
    with pytest.raises(TypeError, match="out"):
        call(x, dy, w, out=out[:2], backend="host")
    with pytest.raises(ValueError, match="out has shape"):
        call(x, dy, w, out=(out[0], out[1], np.empty(4, np.float32)), backend="host")
    with pytest.raises(ValueError, match="out overlaps dx"):
        call(x, dy, w, out=(out[0], out[1], out[0].reshape(-1)[:3]), backend="host")
    with pytest.raises(ValueError, match="out overlaps dy"):
        call(x, dy, w, out=(out[0], dy.reshape(-1)[:w.size].reshape(w.shape), out[2]), backend="host")
    with pytest.raises(TypeError, match="w"):
        call(x, dy, w.astype(np.float64), backend="host")
    with pytest.raises(MemoryError):
        pyooc.plan_conv_backward_data_filter_bias(x.shape, dy.shape, w.shape, memory_limit=1, backend="host")
