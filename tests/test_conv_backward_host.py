"""Host-backend numerics of the gradients (conv_backward_data, _filter, _bias) against float64
references: the adjoint identity, geometry mixes in 1D/2D/3D, every split kind forced by budgets
(staged and by direct DMA, with uneven edges), stride beyond the kernel span, alpha/beta, and
what the plans and last_stats() report."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyooc
from backward_helpers import (OPS, TOL, check_backward_tiling, find_backward_budget, plan_backward, random_backward,
                              reference_backward_bias, reference_backward_data, reference_backward_filter,
                              run_backward_checked, smallest_backward_budget, split_set, uneven_dims)
from conftest import host_direct_access, output_shape, reference_conv, rel_err


def inner(a, b):
    return float(np.sum(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)))


# --------------------------------------------------------------------------------------------
# The references, and the adjoint identity <conv(x, w), dy> = <x, dx> = <w, dw>


ADJOINT_CASES = [
    pytest.param((2, 3, 11), (2, 3, 3), dict(stride=2, padding=2, dilation=3), id="1d"),
    pytest.param((1, 2, 7, 6), (3, 2, 2, 3), dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1)), id="2d"),
    pytest.param((2, 2, 10, 7), (3, 2, 1, 2), dict(stride=(3, 4), padding=(0, 1)), id="2d-stride-beyond-kernel"),
    pytest.param((1, 2, 5, 4, 6), (2, 2, 2, 3, 2), dict(stride=(1, 2, 3), padding=(1, 0, 1), dilation=(2, 1, 1)),
                 id="3d"),
]


@pytest.mark.parametrize("x_shape, w_shape, geometry", ADJOINT_CASES)
def test_references_are_adjoints(rng, x_shape, w_shape, geometry):
    """In float64 the references satisfy the identity exactly (to rounding): they are the adjoints of
    conftest.reference_conv, and the bias gradient is dy's sum."""
    x, w, dy = (a.astype(np.float64) for a in random_backward(rng, x_shape, w_shape, **geometry))
    y = reference_conv(x, w, **geometry)
    dx = reference_backward_data(dy, w, x_shape, **geometry)
    dw = reference_backward_filter(x, dy, w_shape, **geometry)
    assert abs(inner(y, dy) - inner(x, dx)) <= 1e-12 * (1 + abs(inner(y, dy)))
    assert abs(inner(y, dy) - inner(w, dw)) <= 1e-12 * (1 + abs(inner(y, dy)))
    b = rng.standard_normal(w_shape[0])
    assert abs(inner(reference_conv(x, w, b, **geometry) - y, dy) - inner(b, reference_backward_bias(dy))) < 1e-9


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_adjoint_identity_with_pyooc_results(rng, data):
    """<conv(x, w), dy> = <x, dx> = <w, dw> in float64 with dx, dw from pyooc's host backend, on random
    shapes and geometries under random budgets (so the gradients run split)."""
    spatial = data.draw(st.integers(1, 3))
    n, c, k = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    dilation = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    padding = [data.draw(st.integers(0, 2)) for _ in range(spatial)]
    stride = [data.draw(st.integers(1, 4)) for _ in range(spatial)]
    inp = [data.draw(st.integers(max(1, d * (kk - 1) + 1 - 2 * p), 12 if spatial < 3 else 7))
           for kk, d, p in zip(kernel, dilation, padding)]
    geometry = dict(stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))
    x_shape, w_shape = (n, c, *inp), (k, c, *kernel)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    y = reference_conv(x, w, **geometry)
    fraction = data.draw(st.floats(0.0, 1.0))
    results = {}
    for op in ("data", "filter"):
        smallest = smallest_backward_budget(op, x_shape, w_shape, **geometry)
        limit = int(smallest + fraction * 4 * (x.size + w.size + dy.size))
        results[op] = run_backward_checked(op, x, w, dy, memory_limit=limit, **geometry)
    dx = pyooc.conv_backward_data(dy, w, x_shape, memory_limit=results["data"].memory_limit, backend="host",
                                  **geometry)
    dw = pyooc.conv_backward_filter(x, dy, w_shape, memory_limit=results["filter"].memory_limit, backend="host",
                                    **geometry)
    scale = math.sqrt(inner(np.abs(y), np.abs(dy)) + 1.0)
    assert abs(inner(y, dy) - inner(x, dx)) < 1e-5 * scale * math.sqrt(y.size + 1)
    assert abs(inner(y, dy) - inner(w, dw)) < 1e-5 * scale * math.sqrt(y.size + 1)


def test_known_answers():
    # 1D: x = [1, 2, 3, 4], w = [1, 0, -1], y = [-2, -2]; dy = [1, 10].
    x = np.array([[[1, 2, 3, 4]]], dtype=np.float32)
    w = np.array([[[1, 0, -1]]], dtype=np.float32)
    dy = np.array([[[1, 10]]], dtype=np.float32)
    assert pyooc.conv_backward_data(dy, w, x.shape, backend="host").tolist() == [[[1, 10, -1, -10]]]
    assert pyooc.conv_backward_filter(x, dy, w.shape, backend="host").tolist() == [[[21, 32, 43]]]
    assert pyooc.conv_backward_bias(dy, backend="host").tolist() == [11]
    # Stride 3, kernel 1: dx rows 1, 2, 4, 5 get no gradient.
    x = np.zeros((1, 1, 6), dtype=np.float32)
    w = np.array([[[2]]], dtype=np.float32)
    dy = np.array([[[1, 5]]], dtype=np.float32)
    assert pyooc.conv_backward_data(dy, w, x.shape, stride=3, backend="host").tolist() == [[[2, 0, 0, 10, 0, 0]]]


# --------------------------------------------------------------------------------------------
# Unsplit: geometry mixes


GEOMETRIES = [
    pytest.param((2, 3, 17), (4, 3, 3), dict(), id="1d-plain"),
    pytest.param((2, 3, 19), (5, 3, 4), dict(stride=2, padding=3, dilation=2), id="1d-s2-p3-d2"),
    pytest.param((1, 2, 3), (3, 2, 4), dict(padding=1), id="1d-kernel-fits-only-padded"),
    pytest.param((2, 3, 9, 11), (4, 3, 3, 3), dict(padding=1), id="2d-same"),
    pytest.param((2, 3, 12, 13), (4, 3, 3, 2), dict(stride=(2, 3), padding=(1, 0), dilation=(1, 2)), id="2d-mixed"),
    pytest.param((1, 4, 10, 10), (2, 4, 1, 1), dict(stride=3), id="2d-1x1-stride3"),
    pytest.param((1, 2, 6, 7, 8), (3, 2, 3, 3, 3), dict(padding=1), id="3d-same"),
    pytest.param((2, 2, 7, 9, 8), (3, 2, 2, 3, 3), dict(stride=(1, 2, 3), padding=(0, 1, 2), dilation=(2, 1, 2)),
                 id="3d-mixed"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("x_shape, w_shape, geometry", GEOMETRIES)
def test_unsplit_geometries(rng, op, x_shape, w_shape, geometry):
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    plan = run_backward_checked(op, x, w, dy, **geometry)
    assert plan.num_chunks == 1


@pytest.mark.parametrize("op", OPS)
def test_result_without_out_is_new_array(rng, op):
    x, w, dy = random_backward(rng, (2, 3, 9, 8), (4, 3, 3, 3), padding=1)
    fn = {"data": lambda: pyooc.conv_backward_data(dy, w, x.shape, padding=1, backend="host"),
          "filter": lambda: pyooc.conv_backward_filter(x, dy, w.shape, padding=1, backend="host"),
          "bias": lambda: pyooc.conv_backward_bias(dy, backend="host")}[op]
    got = fn()
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.flags.c_contiguous
    assert got.shape == {"data": x.shape, "filter": w.shape, "bias": (4,)}[op]
    assert not any(np.shares_memory(got, a) for a in (x, w, dy))


# --------------------------------------------------------------------------------------------
# Forced splits: budgets at which the planner splits exactly the named dimensions. Cases give the
# dimensions that must not split extent 1 (or make them not worth splitting), so they hold whatever
# the cost model prefers.


DATA_SPLITS = [
    pytest.param((11, 2, 9), (3, 2, 3), dict(padding=1), "n", id="n"),
    pytest.param((1, 29, 9, 9), (5, 29, 3, 3), dict(padding=1), "c", id="c"),
    pytest.param((1, 2, 10), (37, 2, 3), dict(), "k", id="k-accumulates"),
    pytest.param((1, 3, 203), (4, 3, 5), dict(padding=2), "w", id="1d-w"),
    pytest.param((1, 3, 211), (4, 3, 5), dict(padding=3, stride=2, dilation=3), "w", id="1d-w-stride-dilation"),
    pytest.param((1, 2, 301), (3, 2, 1), dict(stride=3), "w", id="1d-w-stride-beyond-kernel"),
    pytest.param((1, 2, 241), (3, 2, 2), dict(stride=5, padding=1, dilation=2), "w", id="1d-w-stride5-span3"),
    pytest.param((1, 3, 41, 9), (4, 3, 3, 3), dict(padding=1), "h", id="2d-h"),
    pytest.param((1, 3, 63, 9), (4, 3, 3, 3), dict(padding=(3, 1), stride=(2, 1), dilation=(2, 1)), "h",
                 id="2d-h-stride-dilation"),
    pytest.param((1, 3, 9, 41), (4, 3, 3, 3), dict(padding=1), "w", id="2d-w"),
    pytest.param((1, 2, 31, 7, 7), (3, 2, 3, 3, 3), dict(padding=1), "d", id="3d-d"),
    pytest.param((1, 2, 7, 31, 7), (3, 2, 3, 3, 3), dict(padding=1), "h", id="3d-h"),
    pytest.param((1, 2, 7, 7, 31), (3, 2, 3, 3, 3), dict(padding=1), "w", id="3d-w"),
    pytest.param((3, 3, 41, 9), (4, 3, 3, 3), dict(padding=1), "nh", id="n+h"),
    pytest.param((1, 17, 10), (37, 17, 3), dict(), "kc", id="k+c"),
    pytest.param((3, 3, 13, 11, 9), (5, 3, 3, 3, 3), dict(padding=1), "nkcdhw", id="3d-everything"),
]

FILTER_SPLITS = [
    pytest.param((29, 2, 9), (3, 2, 3), dict(padding=1), "n", id="n-accumulates"),
    pytest.param((1, 1, 1), (1029, 1, 1), dict(), "k", id="k"),
    pytest.param((1, 1029, 1), (1, 1029, 1), dict(), "c", id="c"),
    pytest.param((1, 3, 203), (4, 3, 5), dict(padding=2), "w", id="1d-w-accumulates"),
    pytest.param((1, 3, 211), (4, 3, 5), dict(padding=3, stride=2, dilation=3), "w", id="1d-w-stride-dilation"),
    pytest.param((1, 3, 41, 9), (4, 3, 3, 3), dict(padding=1), "h", id="2d-h"),
    pytest.param((1, 3, 9, 41), (4, 3, 3, 3), dict(padding=1), "w", id="2d-w"),
    pytest.param((1, 2, 31, 7, 7), (3, 2, 3, 3, 3), dict(padding=1), "d", id="3d-d"),
    pytest.param((1, 2, 7, 7, 31), (3, 2, 3, 3, 3), dict(padding=1), "w", id="3d-w"),
    pytest.param((13, 3, 41, 9), (4, 3, 3, 3), dict(padding=1), "nh", id="n+h"),
    pytest.param((3, 3, 13, 11, 9), (5, 3, 3, 3, 3), dict(padding=1), "nkcdhw", id="3d-everything"),
]

BIAS_SPLITS = [
    pytest.param((1029, 1, 1), (1, 1, 1), dict(), "n", id="n"),
    pytest.param((1, 1, 1), (1029, 1, 1), dict(), "k", id="k"),
    pytest.param((1, 1, 1029), (1, 1, 1), dict(), "w", id="1d-w"),
    pytest.param((1, 1, 3, 417), (1, 1, 1, 1), dict(), "hw", id="2d-h+w"),
    pytest.param((1, 1, 9, 9, 9), (1, 1, 1, 1, 1), dict(), "dhw", id="3d-d+h+w"),
]

FORCED = ([pytest.param("data", *p.values, id="data-" + p.id) for p in DATA_SPLITS] +
          [pytest.param("filter", *p.values, id="filter-" + p.id) for p in FILTER_SPLITS] +
          [pytest.param("bias", *p.values, id="bias-" + p.id) for p in BIAS_SPLITS])


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("op, x_shape, w_shape, geometry, want", FORCED)
def test_forced_split(rng, op, x_shape, w_shape, geometry, want, direct):
    limit, planned = find_backward_budget(op, x_shape, w_shape, set(want), **geometry)
    check_backward_tiling(planned)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    with host_direct_access(direct):
        plan = run_backward_checked(op, x, w, dy, memory_limit=limit, direct=direct, **geometry)
    assert split_set(plan) == set(want), plan.splits
    assert plan.num_chunks > 1
    assert plan.splits == planned.splits and plan.tiles == planned.tiles


@pytest.mark.parametrize("op, x_shape, w_shape, geometry, want",
                         [FORCED[0], FORCED[3], FORCED[len(DATA_SPLITS) + 3], FORCED[-3]])
def test_forced_split_uneven_edge(rng, op, x_shape, w_shape, geometry, want):
    limit, _ = find_backward_budget(op, x_shape, w_shape, set(want), uneven=True, **geometry)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    plan = run_backward_checked(op, x, w, dy, memory_limit=limit, **geometry)
    assert split_set(plan) == set(want) and uneven_dims(plan)


def test_rows_no_dy_row_reaches_are_beta_times_out(rng):
    """Stride 200, kernel 1: only dx rows 0, 200, 400, 600 get a gradient; tiles of the tightest plan
    mostly hold none of them. Every other row is exactly 0 (beta = 0, over NaN) or beta * out."""
    x_shape, w_shape, geometry = (2, 1, 640), (1, 1, 1), dict(stride=200)
    limit = smallest_backward_budget("data", x_shape, w_shape, **geometry)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    plan = run_backward_checked("data", x, w, dy, memory_limit=limit, **geometry)
    assert sum(1 for ch in plan.chunks if ch["dy_read"][0][0] == ch["dy_read"][0][1]) > 4, str(plan)
    dx = pyooc.conv_backward_data(dy, w, x_shape, memory_limit=limit, backend="host", **geometry)
    mask = np.arange(640) % 200 != 0
    assert (dx[..., mask] == 0).all()
    old = rng.standard_normal(x_shape, dtype=np.float32)
    out = old.copy()
    pyooc.conv_backward_data(dy, w, x_shape, out=out, beta=0.5, memory_limit=limit, backend="host", **geometry)
    assert np.array_equal(out[..., mask], (np.float64(0.5) * old[..., mask]).astype(np.float32))


def test_smallest_budget_runs(rng):
    for op in OPS:
        x_shape, w_shape, geometry = (2, 3, 11, 13), (4, 3, 3, 3), dict(padding=1)
        limit = smallest_backward_budget(op, x_shape, w_shape, **geometry)
        x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
        plan = run_backward_checked(op, x, w, dy, memory_limit=limit, **geometry)
        assert plan.peak_device_bytes == limit
        with pytest.raises(MemoryError, match="needs"):
            plan_backward(op, x_shape, w_shape, memory_limit=limit - 1, **geometry)


# --------------------------------------------------------------------------------------------
# alpha / beta


ALPHA_BETA_CASES = [
    pytest.param("data", (3, 7, 13, 9), (5, 7, 3, 3), dict(padding=1), "", id="data-unsplit"),
    pytest.param("data", (1, 2, 10), (37, 2, 3), dict(), "k", id="data-k-accumulates"),
    pytest.param("data", (1, 2, 301), (3, 2, 1), dict(stride=3), "w", id="data-w-stride-beyond-kernel"),
    pytest.param("filter", (3, 7, 13, 9), (5, 7, 3, 3), dict(padding=1), "", id="filter-unsplit"),
    pytest.param("filter", (29, 2, 9), (3, 2, 3), dict(padding=1), "n", id="filter-n-accumulates"),
    pytest.param("filter", (1, 3, 41, 9), (4, 3, 3, 3), dict(padding=1), "h", id="filter-h-accumulates"),
    pytest.param("bias", (1029, 1, 1), (1, 1, 1), dict(), "n", id="bias-n-accumulates"),
    pytest.param("bias", (1, 1, 1), (1029, 1, 1), dict(), "k", id="bias-k"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, -1.5), (0.0, 1.0), (0.0, 0.0), (-1.0, 0.0)])
@pytest.mark.parametrize("op, x_shape, w_shape, geometry, split", ALPHA_BETA_CASES)
def test_alpha_beta(rng, op, alpha, beta, x_shape, w_shape, geometry, split, direct):
    """out = alpha * gradient + beta * out with a random out: beta applies once, also where the
    output accumulates over several chunks (k for data, n and space for filter and bias)."""
    limit = find_backward_budget(op, x_shape, w_shape, set(split), **geometry)[0] if split else None
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    shape = {"data": x_shape, "filter": w_shape, "bias": (w_shape[0],)}[op]
    out = rng.standard_normal(shape, dtype=np.float32)
    with host_direct_access(direct):
        plan = run_backward_checked(op, x, w, dy, out=out, alpha=alpha, beta=beta, memory_limit=limit,
                                    direct=direct, **geometry)
    if split:
        assert split_set(plan) == set(split)


@pytest.mark.parametrize("op", OPS)
def test_beta_zero_ignores_nan_out(rng, op):
    x, w, dy = random_backward(rng, (2, 3, 8, 8), (4, 3, 3, 3))
    shape = {"data": x.shape, "filter": w.shape, "bias": (4,)}[op]
    out = np.full(shape, np.nan, dtype=np.float32)
    run_backward_checked(op, x, w, dy, out=out, memory_limit="2KiB")
    assert np.isfinite(out).all()


# --------------------------------------------------------------------------------------------
# Plans and stats


@pytest.mark.parametrize("op", OPS)
def test_plan_attributes(op):
    x_shape, w_shape, geometry = (3, 5, 29, 11), (4, 5, 3, 3), dict(padding=1, stride=2)
    plan = plan_backward(op, x_shape, w_shape, memory_limit="4KiB", **geometry)
    y_shape = output_shape(x_shape, w_shape, **geometry)
    assert plan.operation == f"conv_backward_{op}"
    assert plan.backend == "host"
    assert plan.y_shape == y_shape
    if op == "bias":
        assert plan.x_shape is None and plan.w_shape is None
    else:
        assert plan.x_shape == x_shape and plan.w_shape == w_shape
    assert set(plan.splits) == {"n", "k", "c", "h", "w"} == set(plan.tiles)
    assert plan.num_chunks == len(plan.chunks) == math.prod(plan.splits.values()) > 1
    assert 0 < plan.peak_device_bytes <= plan.memory_limit == 4096
    out_elements = {"data": math.prod(x_shape), "filter": math.prod(w_shape), "bias": w_shape[0]}[op]
    assert plan.bytes_d2h == 4 * out_elements
    assert plan.loop_order in {"data": ("ns_outer", "c_outer"), "filter": ("k_outer", "c_outer"),
                               "bias": ("k_outer",)}[op]
    keys = {"data": {"n", "c", "k", "dx", "dx_computed", "dy", "dy_read", "load_dy", "load_w", "first", "last"},
            "filter": {"n", "k", "c", "dy", "x", "load_x", "load_dy", "first", "last"},
            "bias": {"n", "k", "dy", "load_dy", "first", "last"}}[op]
    assert set(plan.chunks[0]) == keys
    check_backward_tiling(plan)
    text = str(plan)
    assert f"backward {op}" in text and f"{plan.num_chunks} chunks" in text
    assert f"<pyooc.Plan conv_backward_{op} " in repr(plan)


def test_plan_data_reads_exactly_the_contributing_dy_rows():
    x_shape, w_shape, geometry = (1, 2, 97), (3, 2, 3), dict(stride=2, padding=2, dilation=3)
    limit, plan = find_backward_budget("data", x_shape, w_shape, {"w"}, **geometry)
    out = output_shape(x_shape, w_shape, **geometry)[2]
    for ch in plan.chunks:
        (t0, t1), = ch["dx"]
        rows = [o for o in range(out) for j in range(3) if t0 <= o * 2 - 2 + j * 3 < t1]
        assert ch["dy_read"] == (((min(rows), max(rows) + 1),) if rows else ((ch["dy_read"][0][0],) * 2,))
        (c0, c1), = ch["dx_computed"]
        assert c0 <= t0 and t1 <= c1


def test_filter_gradient_moves_dw_once(rng):
    """dw is reduced on the device: however x and dy are streamed, dw crosses the link once."""
    x_shape, w_shape, geometry = (29, 2, 9), (3, 2, 3), dict(padding=1)
    limit, _ = find_backward_budget("filter", x_shape, w_shape, {"n"}, **geometry)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    plan = run_backward_checked("filter", x, w, dy, memory_limit=limit, **geometry)
    assert plan.num_chunks > 1 and pyooc.last_stats()["bytes_d2h"] == w.nbytes


def test_memory_error_says_what_is_needed():
    with pytest.raises(MemoryError, match=r"backward data.*needs .*\(\d+ bytes"):
        pyooc.plan_conv_backward_data((2, 4, 4, 4), (4, 3, 9, 9), (2, 3, 12, 12), memory_limit=1000, backend="host")


def test_last_stats_follows_the_last_call(rng):
    x, w, dy = random_backward(rng, (2, 3, 8), (4, 3, 3))
    pyooc.conv_backward_filter(x, dy, w.shape, backend="host")
    assert pyooc.last_stats()["plan"].operation == "conv_backward_filter"
    pyooc.conv_forward(x, w, backend="host")
    assert pyooc.last_stats()["plan"].operation == "conv_forward"
    pyooc.conv_backward_bias(dy, backend="host")
    assert pyooc.last_stats()["plan"].operation == "conv_backward_bias"


# --------------------------------------------------------------------------------------------
# Randomized property test


@st.composite
def problems(draw):
    spatial = draw(st.integers(1, 3))
    n, c, k = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    kernel, inp, stride, padding, dilation = [], [], [], [], []
    for _ in range(spatial):
        kd, dd, pd = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 2))
        kernel.append(kd)
        dilation.append(dd)
        padding.append(pd)
        inp.append(draw(st.integers(max(1, dd * (kd - 1) + 1 - 2 * pd), 12 if spatial < 3 else 7)))
        stride.append(draw(st.integers(1, 4)))
    return dict(op=draw(st.sampled_from(OPS)), x_shape=(n, c, *inp), w_shape=(k, c, *kernel),
                geometry=dict(stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation)),
                budget_fraction=draw(st.floats(0.0, 1.0)), alpha=draw(st.sampled_from([1.0, 0.5, -2.0])),
                beta=draw(st.sampled_from([0.0, 0.0, 1.0, -0.75])), direct=draw(st.booleans()),
                seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_random_problems(case):
    rng = np.random.default_rng(case["seed"])
    op, x_shape, w_shape, geometry = case["op"], case["x_shape"], case["w_shape"], case["geometry"]
    smallest = smallest_backward_budget(op, x_shape, w_shape, **geometry)
    working = 4 * (math.prod(x_shape) + math.prod(w_shape) + 2 * math.prod(output_shape(x_shape, w_shape, **geometry)))
    limit = int(smallest + case["budget_fraction"] * max(0, working - smallest))
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    shape = {"data": x_shape, "filter": w_shape, "bias": (w_shape[0],)}[op]
    out = rng.standard_normal(shape, dtype=np.float32) if case["beta"] != 0.0 else None
    with host_direct_access(case["direct"]):
        run_backward_checked(op, x, w, dy, out=out, alpha=case["alpha"], beta=case["beta"], memory_limit=limit,
                             direct=case["direct"], **geometry)
