"""Host-backend numerics of conv_forward against a float64 reference: every split kind alone and
combined (with uneven edges), stride/dilation/padding mixes, alpha/beta/bias, and what last_stats()
reports. The host backend runs the same planner, pipeline and budget as the GPU one."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyooc
from conftest import (TOL, check_tiling, find_budget, host_direct_access, output_shape, random_problem, reference_at,
                      reference_conv, rel_err, run_checked, smallest_budget, split_set, uneven_dims)

# --------------------------------------------------------------------------------------------
# The references themselves, and a known answer


@pytest.mark.parametrize("x_shape, w_shape, geometry", [
    ((2, 3, 11), (2, 3, 3), dict(stride=2, padding=2, dilation=3)),
    ((1, 2, 7, 6), (3, 2, 2, 3), dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1))),
    ((1, 2, 5, 4, 6), (2, 2, 2, 3, 2), dict(stride=(1, 2, 3), padding=(1, 0, 1), dilation=(2, 1, 1))),
])
def test_reference_conv_matches_definition(rng, x_shape, w_shape, geometry):
    """reference_conv (slab einsum) agrees with reference_at (tap-by-tap definition) everywhere."""
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    ref = reference_conv(x, w, b, alpha=0.5, **geometry)
    assert ref.shape == output_shape(x_shape, w_shape, **geometry)
    for index in np.ndindex(*ref.shape):
        assert abs(ref[index] - reference_at(x, w, index, b, alpha=0.5, **geometry)) < 1e-12


def test_known_answer_is_cross_correlation():
    x = np.array([[[1, 2, 3, 4]]], dtype=np.float32)
    w = np.array([[[1, 0, -1]]], dtype=np.float32)
    assert pyooc.conv_forward(x, w, backend="host").tolist() == [[[-2.0, -2.0]]]
    assert pyooc.conv_forward(x, w, padding=1, backend="host").tolist() == [[[-2.0, -2.0, -2.0, 3.0]]]
    assert pyooc.conv_forward(x, w, padding=1, stride=2, backend="host").tolist() == [[[-2.0, -2.0]]]
    assert pyooc.conv_forward(x, w, padding=2, dilation=2, backend="host").tolist() == [[[-3.0, -4.0, 1.0, 2.0]]]


# --------------------------------------------------------------------------------------------
# Unsplit: geometry mixes in 1D, 2D, 3D


GEOMETRIES = [
    pytest.param((2, 3, 17), (4, 3, 3), dict(), id="1d-plain"),
    pytest.param((2, 3, 19), (5, 3, 4), dict(stride=2, padding=3, dilation=2), id="1d-s2-p3-d2"),
    pytest.param((1, 2, 5), (3, 2, 5), dict(), id="1d-kernel-equals-input"),
    pytest.param((1, 2, 3), (3, 2, 4), dict(padding=1), id="1d-kernel-fits-only-padded"),
    pytest.param((2, 3, 9, 11), (4, 3, 3, 3), dict(padding=1), id="2d-same"),
    pytest.param((2, 3, 12, 13), (4, 3, 3, 2), dict(stride=(2, 3), padding=(1, 0), dilation=(1, 2)), id="2d-mixed"),
    pytest.param((1, 4, 10, 10), (2, 4, 1, 1), dict(stride=3), id="2d-1x1-stride3"),
    pytest.param((3, 2, 7, 8), (3, 2, 5, 5), dict(padding=4), id="2d-padding-beyond-kernel-center"),
    pytest.param((1, 2, 6, 7, 8), (3, 2, 3, 3, 3), dict(padding=1), id="3d-same"),
    pytest.param((2, 2, 7, 9, 8), (3, 2, 2, 3, 3), dict(stride=(1, 2, 3), padding=(0, 1, 2), dilation=(2, 1, 2)),
                 id="3d-mixed"),
]


@pytest.mark.parametrize("x_shape, w_shape, geometry", GEOMETRIES)
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_unsplit_geometries(rng, x_shape, w_shape, geometry, with_bias):
    x, w, b = random_problem(rng, x_shape, w_shape, bias=with_bias)
    run_checked(x, w, bias=b, **geometry)


@pytest.mark.parametrize("x_shape, w_shape, geometry", GEOMETRIES[:6:2])
def test_result_without_out_is_new_array(rng, x_shape, w_shape, geometry):
    x, w, _ = random_problem(rng, x_shape, w_shape)
    y = pyooc.conv_forward(x, w, backend="host", **geometry)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.flags.c_contiguous
    assert y.shape == output_shape(x_shape, w_shape, **geometry)
    assert not np.shares_memory(y, x) and not np.shares_memory(y, w)
    assert rel_err(y, reference_conv(x, w, **geometry)) < TOL


def test_stride_as_tuple_equals_int(rng):
    x, w, _ = random_problem(rng, (1, 2, 9, 9), (3, 2, 3, 3))
    a = pyooc.conv_forward(x, w, stride=2, padding=1, dilation=1, backend="host")
    b = pyooc.conv_forward(x, w, stride=(2, 2), padding=[1, 1], dilation=(1, 1), backend="host")
    assert np.array_equal(a, b)


# --------------------------------------------------------------------------------------------
# Forced splits: budgets at which the planner splits exactly the named dimensions


# Every dimension not named in `want` has extent 1 (N, K, C, or an output extent of 1), so no
# budget can make the planner split anything else: the scan in find_budget then only has to find
# a budget at which all wanted dimensions are split, whatever the cost model prefers.
SPLITS = [
    # one dimension alone
    pytest.param((11, 1, 9, 9), (1, 1, 9, 9), dict(), "n", id="n"),
    pytest.param((1, 1, 9, 9), (29, 1, 9, 9), dict(), "k", id="k"),
    pytest.param((1, 23, 9, 9), (1, 23, 9, 9), dict(), "c", id="c-accumulates"),
    pytest.param((1, 45, 5, 7), (1, 45, 3, 5), dict(padding=(1, 1), stride=(3, 4)), "c", id="c-accumulates-padded"),
    pytest.param((1, 1, 203), (1, 1, 5), dict(padding=2), "w", id="1d-w"),
    pytest.param((1, 1, 211), (1, 1, 5), dict(padding=3, stride=2, dilation=3), "w", id="1d-w-stride-dilation"),
    pytest.param((1, 1, 201, 16), (1, 1, 3, 16), dict(padding=(1, 0)), "h", id="2d-h"),
    pytest.param((1, 1, 255, 16), (1, 1, 3, 14), dict(padding=(3, 1), stride=(2, 5), dilation=(2, 1)), "h",
                 id="2d-h-stride-dilation"),
    pytest.param((1, 1, 7, 203), (1, 1, 7, 3), dict(padding=(0, 1)), "w", id="2d-w"),
    pytest.param((1, 1, 4, 267), (1, 1, 2, 4), dict(padding=(0, 2), stride=(3, 3), dilation=(1, 2)), "w",
                 id="2d-w-stride-dilation"),
    pytest.param((1, 1, 101, 5, 5), (1, 1, 3, 5, 5), dict(padding=(1, 0, 0)), "d", id="3d-d"),
    pytest.param((1, 1, 3, 101, 5), (1, 1, 3, 3, 3), dict(padding=(0, 1, 0), stride=(1, 1, 3)), "h", id="3d-h"),
    pytest.param((1, 1, 5, 5, 101), (1, 1, 5, 5, 3), dict(padding=(0, 0, 1)), "w", id="3d-w"),
    pytest.param((1, 1, 145, 6, 6), (1, 1, 3, 2, 3), dict(padding=(2, 1, 0), stride=(2, 7, 4), dilation=(2, 1, 1)),
                 "d", id="3d-d-stride-dilation"),
    # combinations
    pytest.param((11, 1, 9, 9), (7, 1, 9, 9), dict(), "nk", id="n+k"),
    pytest.param((13, 3, 9, 9), (1, 3, 9, 9), dict(), "nc", id="n+c"),
    pytest.param((1, 5, 9, 9), (37, 5, 9, 9), dict(), "kc", id="k+c"),
    pytest.param((1, 1, 41, 37), (1, 1, 3, 3), dict(padding=1), "hw", id="2d-h+w"),
    pytest.param((3, 3, 41, 16), (1, 3, 3, 16), dict(padding=(1, 0)), "nch", id="n+c+h"),
    pytest.param((3, 5, 41, 23), (1, 5, 3, 3), dict(padding=1), "nchw", id="n+c+h+w"),
    pytest.param((3, 1, 41, 16), (5, 1, 3, 16), dict(padding=(1, 0)), "nkh", id="n+k+h"),
    pytest.param((1, 2, 31, 5, 5), (5, 2, 3, 5, 5), dict(padding=(1, 0, 0)), "kcd", id="3d-k+c+d"),
    pytest.param((1, 2, 31, 5, 31), (1, 2, 3, 5, 3), dict(padding=(1, 0, 1)), "cdw", id="3d-c+d+w"),
    pytest.param((1, 1, 5, 31, 31), (1, 1, 5, 3, 3), dict(padding=(0, 1, 1)), "hw", id="3d-h+w"),
    pytest.param((1, 2, 5, 31, 17), (3, 2, 5, 3, 3), dict(padding=(0, 1, 1)), "kchw", id="3d-k+c+h+w"),
    pytest.param((1, 1, 37, 4, 37), (1, 1, 3, 4, 3), dict(padding=(1, 0, 2), stride=(2, 1, 3), dilation=(1, 1, 2)),
                 "dw", id="3d-d+w-stride-dilation"),
    pytest.param((1, 1, 37, 37, 4), (1, 1, 3, 3, 4), dict(padding=(1, 2, 0), stride=(2, 3, 1), dilation=(1, 2, 1)),
                 "dh", id="3d-d+h-stride-dilation"),
    pytest.param((3, 3, 13, 11, 9), (5, 3, 3, 3, 3), dict(padding=1), "nkcdhw", id="3d-everything"),
]

# Realistic shapes (every dimension > 1): the planner may split more than the named dimensions;
# at least those are split, and numerics and traffic are checked the same way.
SPLITS_AT_LEAST = [
    pytest.param((3, 5, 41, 11), (4, 5, 3, 3), dict(padding=1), "h", id="2d-h"),
    pytest.param((3, 23, 10), (5, 23, 3), dict(), "c", id="1d-c"),
    pytest.param((5, 9, 10), (37, 9, 3), dict(), "k", id="1d-k"),
    pytest.param((2, 3, 13, 11, 9), (5, 3, 3, 3, 3), dict(padding=1, stride=(1, 2, 1)), "dw", id="3d-d+w"),
    pytest.param((4, 6, 17, 19), (8, 6, 3, 3), dict(padding=2, dilation=2), "nc", id="2d-n+c-dilated"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS)
def test_forced_split(rng, x_shape, w_shape, geometry, want, direct):
    limit, planned = find_budget(x_shape, w_shape, set(want), uneven=True, bias=True, **geometry)
    check_tiling(planned)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    with host_direct_access(direct):
        plan = run_checked(x, w, bias=b, memory_limit=limit, direct=direct, **geometry)
    # The split really happened in the run (not just in the plan we asked for).
    assert split_set(plan) == set(want), plan.splits
    assert uneven_dims(plan), f"no uneven edge: splits {plan.splits}, tiles {plan.tiles}"
    assert plan.num_chunks > 1
    assert plan.splits == planned.splits and plan.tiles == planned.tiles


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS_AT_LEAST)
def test_split_realistic_shapes(rng, x_shape, w_shape, geometry, want, direct):
    limit, planned = find_budget(x_shape, w_shape, set(want), at_least=True, bias=True, **geometry)
    check_tiling(planned)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    with host_direct_access(direct):
        plan = run_checked(x, w, bias=b, memory_limit=limit, direct=direct, **geometry)
    assert set(want) <= split_set(plan), plan.splits
    assert plan.splits == planned.splits


@pytest.mark.parametrize("x_shape, w_shape, geometry, want", [SPLITS[2], SPLITS[7], SPLITS[-1]])
def test_forced_split_without_bias(rng, x_shape, w_shape, geometry, want):
    limit, _ = find_budget(x_shape, w_shape, set(want), uneven=True, **geometry)
    x, w, _ = random_problem(rng, x_shape, w_shape)
    plan = run_checked(x, w, memory_limit=limit, **geometry)
    assert split_set(plan) == set(want)


def test_smallest_budget_runs(rng):
    """The smallest budget the planner accepts must also run (the arena holds the plan's peak)."""
    x_shape, w_shape, geometry = (2, 3, 11, 13), (4, 3, 3, 3), dict(padding=1)
    limit = smallest_budget(x_shape, w_shape, bias=True, **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    plan = run_checked(x, w, bias=b, memory_limit=limit, **geometry)
    assert plan.peak_device_bytes == limit
    with pytest.raises(MemoryError):
        pyooc.conv_forward(x, w, bias=b, memory_limit=limit - 1, backend="host", **geometry)


# --------------------------------------------------------------------------------------------
# alpha / beta / bias


ALPHA_BETA_SPLITS = [
    pytest.param((3, 7, 13, 9), (5, 7, 3, 3), dict(padding=1), "", id="unsplit"),
    pytest.param((1, 45, 6, 6), (1, 45, 6, 6), dict(padding=1), "c", id="c"),
    pytest.param((1, 1, 41, 9), (1, 1, 3, 9), dict(padding=(1, 0)), "h", id="h"),
    pytest.param((5, 9, 13), (37, 9, 13), dict(), "nkc", id="n+k+c"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, -1.5), (2.0, 0.25), (0.0, 1.0), (0.0, 0.0), (-1.0, 0.0)])
@pytest.mark.parametrize("x_shape, w_shape, geometry, split", ALPHA_BETA_SPLITS)
def test_alpha_beta_bias(rng, alpha, beta, x_shape, w_shape, geometry, split, direct):
    """y = alpha*conv + beta*out + bias with a random out: beta applies once (not once per
    c-chunk), bias once, on split and unsplit plans."""
    limit = None
    if split:
        limit, _ = find_budget(x_shape, w_shape, set(split), bias=True, beta=beta, **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    out = rng.standard_normal(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    with host_direct_access(direct):
        plan = run_checked(x, w, bias=b, alpha=alpha, beta=beta, out=out, memory_limit=limit, direct=direct,
                           **geometry)
    if split:
        assert split_set(plan) == set(split)


def test_beta_zero_ignores_nan_out(rng):
    """beta = 0 means out's old contents are not read (cuDNN semantics): NaN there must not leak."""
    x, w, b = random_problem(rng, (2, 3, 8, 8), (4, 3, 3, 3), bias=True)
    out = np.full((2, 4, 6, 6), np.nan, dtype=np.float32)
    pyooc.conv_forward(x, w, bias=b, out=out, beta=0.0, backend="host")
    assert np.isfinite(out).all()


def test_beta_traffic_counts_reading_y(rng):
    x, w, _ = random_problem(rng, (2, 3, 8, 8), (4, 3, 3, 3))
    y_bytes = 2 * 4 * 6 * 6 * 4
    p0 = pyooc.plan_conv_forward(x.shape, w.shape, memory_limit="1MiB", backend="host")
    p1 = pyooc.plan_conv_forward(x.shape, w.shape, beta=1.0, memory_limit="1MiB", backend="host")
    if p0.splits == p1.splits and p0.loop_order == p1.loop_order:
        assert p1.bytes_h2d == p0.bytes_h2d + y_bytes
    out = rng.standard_normal((2, 4, 6, 6), dtype=np.float32)
    run_checked(x, w, out=out, beta=1.0, memory_limit="1MiB")
    assert pyooc.last_stats()["bytes_h2d"] >= x.nbytes + w.nbytes + y_bytes


def test_bias_only_adds_per_channel(rng):
    """With zero weights, y is bias broadcast over N and space."""
    x, _, b = random_problem(rng, (2, 3, 5, 6), (4, 3, 2, 2), bias=True)
    w = np.zeros((4, 3, 2, 2), dtype=np.float32)
    y = pyooc.conv_forward(x, w, bias=b, backend="host")
    assert np.array_equal(y, np.broadcast_to(b.reshape(1, 4, 1, 1), y.shape))


# --------------------------------------------------------------------------------------------
# Stats


def test_last_stats_is_per_thread(rng):
    import threading

    x, w, _ = random_problem(rng, (1, 2, 6), (3, 2, 3))
    pyooc.conv_forward(x, w, backend="host", memory_limit="1MiB")
    mine = pyooc.last_stats()
    seen = {}

    def other():
        seen["before"] = pyooc.last_stats()
        pyooc.conv_forward(np.ones((2, 2, 9), np.float32), w, backend="host")
        seen["after"] = pyooc.last_stats()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["before"] is None
    assert seen["after"]["plan"].x_shape == (2, 2, 9)
    assert pyooc.last_stats() is mine
    assert mine["plan"].x_shape == (1, 2, 6)


def test_stats_traffic_at_least_tensors_once(rng):
    x_shape, w_shape, geometry = (3, 3, 41, 9), (5, 3, 3, 3), dict(padding=1)
    limit, _ = find_budget(x_shape, w_shape, set("nkh"), at_least=True, bias=True, **geometry)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    run_checked(x, w, bias=b, memory_limit=limit, **geometry)
    stats = pyooc.last_stats()
    y_bytes = 4 * int(np.prod(output_shape(x_shape, w_shape, **geometry)))
    assert stats["bytes_d2h"] == y_bytes, "each output is written back exactly once"
    # x is read once at least (halos and re-reads only add), w at least once, bias once.
    assert stats["bytes_h2d"] >= x.nbytes + w.nbytes + b.nbytes


# --------------------------------------------------------------------------------------------
# Randomized property test


@st.composite
def problems(draw):
    spatial = draw(st.integers(1, 3))
    n, c, k = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    kernel, inp, stride, padding, dilation = [], [], [], [], []
    for _ in range(spatial):
        kd = draw(st.integers(1, 3))
        dd = draw(st.integers(1, 3))
        pd = draw(st.integers(0, 2))
        span = dd * (kd - 1) + 1
        size = draw(st.integers(max(1, span - 2 * pd), 10 if spatial < 3 else 7))
        kernel.append(kd)
        dilation.append(dd)
        padding.append(pd)
        inp.append(size)
        stride.append(draw(st.integers(1, 3)))
    geometry = dict(stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))
    x_shape, w_shape = (n, c, *inp), (k, c, *kernel)
    fraction = draw(st.floats(0.0, 1.0))
    return dict(
        x_shape=x_shape, w_shape=w_shape, geometry=geometry, budget_fraction=fraction,
        bias=draw(st.booleans()), alpha=draw(st.sampled_from([1.0, 0.5, -2.0])),
        beta=draw(st.sampled_from([0.0, 0.0, 1.0, -0.75])), direct=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_random_problems(case):
    rng = np.random.default_rng(case["seed"])
    x_shape, w_shape, geometry = case["x_shape"], case["w_shape"], case["geometry"]
    y_shape = output_shape(x_shape, w_shape, **geometry)
    assert min(y_shape) >= 1
    smallest = smallest_budget(x_shape, w_shape, bias=case["bias"], **geometry)
    working = 4 * (int(np.prod(x_shape)) + int(np.prod(w_shape)) + 3 * int(np.prod(y_shape))) + 4096
    limit = int(smallest + case["budget_fraction"] * max(0, working - smallest))
    planned = pyooc.plan_conv_forward(x_shape, w_shape, bias=case["bias"], memory_limit=limit, backend="host",
                                      alpha=case["alpha"], beta=case["beta"], pinned=case["direct"], **geometry)
    check_tiling(planned)
    assert planned.peak_device_bytes <= limit
    x, w, b = random_problem(rng, x_shape, w_shape, bias=case["bias"])
    out = rng.standard_normal(y_shape, dtype=np.float32) if case["beta"] != 0.0 else None
    with host_direct_access(case["direct"]):
        plan = run_checked(x, w, bias=b, alpha=case["alpha"], beta=case["beta"], out=out, memory_limit=limit,
                           direct=case["direct"], **geometry)
    assert plan.splits == planned.splits and plan.tiles == planned.tiles


def test_host_backend_reports_no_queue_times(rng):
    """Queue busy times are a cuda-backend measurement; the host backend says -1, not a made-up figure."""
    x = rng.standard_normal((2, 3, 9, 9), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    pyooc.conv_forward(x, w, backend="host")
    stats = pyooc.last_stats()
    assert (stats["h2d_busy_seconds"], stats["compute_busy_seconds"], stats["d2h_busy_seconds"]) == (-1, -1, -1)


def test_bias_is_positional_as_in_torch(rng):
    # torch.nn.functional.conv2d(input, weight, bias): the third argument is the bias.
    x, w, b = random_problem(rng, (2, 3, 9, 9), (4, 3, 3, 3), bias=True)
    by_position = pyooc.conv_forward(x, w, b, padding=1, backend="host")
    np.testing.assert_array_equal(by_position, pyooc.conv_forward(x, w, bias=b, padding=1, backend="host"))
    assert rel_err(by_position, reference_conv(x, w, b, padding=1)) < TOL
