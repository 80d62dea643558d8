"""plan_conv_forward: the Plan's attributes and printout, the MemoryError for impossible budgets,
memory_limit parsing and the process-wide default, and the chunk list (it tiles y exactly)."""

import math
import re

import numpy as np
import pytest

import pyooc
from conftest import (SPATIAL_NAMES, check_tiling, find_budget, output_shape, random_problem, reference_conv,
                      rel_err, smallest_budget)


@pytest.fixture
def default_limit_restored():
    """Tests that change the process-wide default put it back (None: automatic)."""
    before = pyooc.get_memory_limit()
    yield
    pyooc.set_memory_limit(before)


PROBLEMS = [
    pytest.param((3, 5, 29), (4, 5, 3), dict(padding=1, stride=2), id="1d"),
    pytest.param((2, 3, 41, 9), (5, 3, 3, 3), dict(padding=1), id="2d"),
    pytest.param((2, 3, 13, 11, 9), (5, 3, 3, 2, 3), dict(padding=(1, 0, 1), dilation=(2, 1, 1)), id="3d"),
]


@pytest.mark.parametrize("x_shape, w_shape, geometry", PROBLEMS)
@pytest.mark.parametrize("limit", ["4KiB", "16KiB", "1MiB"])
def test_plan_attributes(x_shape, w_shape, geometry, limit):
    plan = pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=limit, backend="host", **geometry)
    spatial = len(x_shape) - 2
    names = {"n", "k", "c", *SPATIAL_NAMES[spatial]}
    y_shape = output_shape(x_shape, w_shape, **geometry)

    assert plan.operation == "conv_forward"
    assert plan.backend == "host"
    assert plan.x_shape == tuple(x_shape) and plan.w_shape == tuple(w_shape) and plan.y_shape == y_shape
    assert set(plan.splits) == names and set(plan.tiles) == names
    extent = {"n": x_shape[0], "k": w_shape[0], "c": x_shape[1], **dict(zip(SPATIAL_NAMES[spatial], y_shape[2:]))}
    for d in names:
        assert isinstance(plan.splits[d], int) and isinstance(plan.tiles[d], int)
        assert 1 <= plan.tiles[d] <= extent[d]
        assert plan.splits[d] == math.ceil(extent[d] / plan.tiles[d]), d
    assert plan.num_chunks == len(plan.chunks) == math.prod(plan.splits.values())
    assert plan.memory_limit == pyooc.parse_memory_limit(limit)
    assert 0 < plan.peak_device_bytes <= plan.memory_limit
    assert plan.peak_device_bytes % 256 == 0, "slots are 256-byte aligned"
    assert plan.bytes_d2h == 4 * math.prod(y_shape)
    assert plan.bytes_h2d >= 4 * (math.prod(x_shape) + math.prod(w_shape))
    assert plan.predicted_seconds > 0
    assert plan.loop_order in ("k_outer", "ns_outer")
    assert isinstance(plan.w_resident, bool)
    assert plan.buffers in (1, 2, 3)
    kernel = math.prod(w_shape[2:])
    assert plan.flops == 2.0 * math.prod(y_shape) * x_shape[1] * kernel


@pytest.mark.parametrize("x_shape, w_shape, geometry", PROBLEMS)
def test_plan_str(x_shape, w_shape, geometry):
    want = {3: {"n", "c"}, 4: {"n", "h"}, 5: {"n", "h"}}[len(x_shape)]
    limit, plan = find_budget(x_shape, w_shape, want, at_least=True, **geometry)
    text = str(plan)
    s = plan.splits
    spatial = [s[d] for d in SPATIAL_NAMES[len(x_shape) - 2]]
    assert f"splits: n={s['n']} k={s['k']} c={s['c']} out=[{', '.join(map(str, spatial))}]" in text, text
    t = plan.tiles
    tiles = [t[d] for d in SPATIAL_NAMES[len(x_shape) - 2]]
    assert f"tiles: n={t['n']} k={t['k']} c={t['c']} out=[{', '.join(map(str, tiles))}]" in text, text
    assert f"{plan.num_chunks} chunks" in text
    assert f"loop order {plan.loop_order}" in text
    assert "memory_limit" in text and "device peak" in text
    assert f"({limit} B)" in text or _fmt(limit) in text, text
    assert _fmt(plan.peak_device_bytes) in text
    assert f"{_fmt(plan.bytes_h2d)} H2D" in text and f"{_fmt(plan.bytes_d2h)} D2H" in text
    assert f"x{list(x_shape)}" in text and f"w{list(w_shape)}" in text
    assert f"conv{len(x_shape) - 2}d forward float32" in text
    r = repr(plan)
    assert r.startswith("<pyooc.Plan conv_forward") and str(plan.peak_device_bytes) in r


def _fmt(nbytes):
    """libooc's format_bytes: '300 B', '1.50 KiB', ..."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    value, u = float(nbytes), 0
    while value >= 1024 and u < 4:
        value /= 1024
        u += 1
    return f"{value:.0f} B" if u == 0 else f"{value:.2f} {units[u]}"


def test_memory_error_message():
    x_shape, w_shape = (2, 3, 12, 12), (4, 3, 9, 9)
    needed = smallest_budget(x_shape, w_shape)
    with pytest.raises(MemoryError) as info:
        pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=needed - 1, backend="host")
    msg = str(info.value)
    assert msg.startswith(f"memory_limit of {_fmt(needed - 1)} is too small for conv2d forward float32"), msg
    assert f"the smallest plan needs {_fmt(needed)} ({needed} bytes" in msg, msg
    plan = pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=needed, backend="host")
    assert plan.peak_device_bytes == needed
    # An impossible budget is reported by plan and by run alike, before anything runs.
    x, w, _ = random_problem(np.random.default_rng(0), x_shape, w_shape)
    with pytest.raises(MemoryError, match=re.escape(f"({needed} bytes")):
        pyooc.conv_forward(x, w, memory_limit=needed - 1, backend="host")


@pytest.mark.parametrize("text, expected", [
    ("2MiB", 2 * 2**20), ("2 MiB", 2 * 2**20), ("2mib", 2 * 2**20), (" 512MiB ", 512 * 2**20),
    ("2GiB", 2 * 2**30), ("1TiB", 2**40), ("1KiB", 1024), ("1.5GB", 1_500_000_000), ("1.5 GiB", 3 * 2**29),
    ("4096", 4096), ("4096B", 4096), ("1k", 1000), ("1kb", 1000), ("3M", 3_000_000), ("1e3", 1000),
    ("0.5KiB", 512), (4096, 4096), (np.int64(4096), 4096), (1e6, 1_000_000), (None, None),
])
def test_parse_memory_limit(text, expected):
    assert pyooc.parse_memory_limit(text) == expected


def test_plan_memory_limit_string():
    plan = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), memory_limit="2MiB", backend="host")
    assert plan.memory_limit == 2 * 2**20
    plan = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), memory_limit="1.5 KiB", backend="host")
    assert plan.memory_limit == 1536 and plan.peak_device_bytes <= 1536


def test_default_memory_limit(rng, default_limit_restored):
    x_shape, w_shape, geometry = (2, 3, 41, 9), (5, 3, 3, 3), dict(padding=1)
    pyooc.set_memory_limit(None)
    assert pyooc.get_memory_limit() is None
    automatic = pyooc.plan_conv_forward(x_shape, w_shape, backend="host", **geometry)
    assert automatic.memory_limit == 2**30, "the host backend's automatic budget is 1 GiB"

    limit, _ = find_budget(x_shape, w_shape, {"n", "h"}, at_least=True, **geometry)
    pyooc.set_memory_limit(limit)
    assert pyooc.get_memory_limit() == limit
    assert pyooc.plan_conv_forward(x_shape, w_shape, backend="host", **geometry).memory_limit == limit

    x, w, _ = random_problem(rng, x_shape, w_shape)
    y = pyooc.conv_forward(x, w, backend="host", **geometry)
    ran = pyooc.last_stats()["plan"]
    assert ran.memory_limit == limit and ran.num_chunks > 1 and ran.peak_device_bytes <= limit
    assert rel_err(y, reference_conv(x, w, **geometry)) < 1e-5

    # An explicit memory_limit wins over the default.
    assert pyooc.plan_conv_forward(x_shape, w_shape, memory_limit="3MiB", backend="host",
                                   **geometry).memory_limit == 3 * 2**20
    pyooc.conv_forward(x, w, memory_limit="3MiB", backend="host", **geometry)
    assert pyooc.last_stats()["plan"].memory_limit == 3 * 2**20

    pyooc.set_memory_limit("5MiB")
    assert pyooc.get_memory_limit() == 5 * 2**20
    pyooc.set_memory_limit(None)
    assert pyooc.get_memory_limit() is None
    assert pyooc.plan_conv_forward(x_shape, w_shape, backend="host", **geometry).memory_limit == 2**30
    pyooc.conv_forward(x, w, backend="host", **geometry)
    assert pyooc.last_stats()["plan"].memory_limit == 2**30


def test_default_too_small_raises_memory_error(rng, default_limit_restored):
    pyooc.set_memory_limit(300)
    x, w, _ = random_problem(rng, (2, 3, 9, 9), (4, 3, 3, 3))
    with pytest.raises(MemoryError, match="needs"):
        pyooc.conv_forward(x, w, backend="host")
    with pytest.raises(MemoryError, match="needs"):
        pyooc.plan_conv_forward(x.shape, w.shape, backend="host")


def test_chunks_tile_output_small_case():
    """A hand-checkable case: 1D, y of length 298 split in w only (N = K = C = 1: nothing else can)."""
    _, plan = find_budget((1, 1, 300), (1, 1, 3), {"w"}, uneven=True, padding=0)
    chunks = plan.chunks
    tile = plan.tiles["w"]
    assert 298 % tile != 0
    expect = [(b, min(b + tile, 298)) for b in range(0, 298, tile)]
    assert [c["out"][0] for c in chunks] == expect
    for c in chunks:
        (ob, oe), (ib, ie) = c["out"][0], c["in"][0]
        assert (ib, ie) == (ob, oe + 2), "input slab = output slab widened by the halo (kernel 3)"
        assert c["n"] == (0, 1) and c["k"] == (0, 1) and c["c"] == (0, 1)
        assert c["first_c"] and c["last_c"]
    check_tiling(plan)


@pytest.mark.parametrize("x_shape, w_shape, geometry, want", [
    ((1, 3, 211), (4, 3, 5), dict(padding=3, stride=2, dilation=3), "w"),
    ((3, 3, 41, 9), (5, 3, 3, 3), dict(padding=1), "nkh"),
    ((5, 9, 10), (37, 9, 3), dict(), "nkc"),
    ((1, 2, 37, 4, 37), (3, 2, 3, 2, 3), dict(padding=(1, 0, 2), stride=(2, 1, 3), dilation=(1, 1, 2)), "dw"),
    ((3, 3, 13, 11, 9), (5, 3, 3, 3, 3), dict(padding=1), "nkcdhw"),
])
def test_chunk_list_properties(x_shape, w_shape, geometry, want):
    """Chunks tile y once; c-tiles accumulate in order; halos follow the geometry; the load flags
    and the traffic totals agree with the chunk list."""
    _, plan = find_budget(x_shape, w_shape, set(want), at_least=True, **geometry)
    check_tiling(plan)
    spatial = len(x_shape) - 2
    names = SPATIAL_NAMES[spatial]
    st = geometry.get("stride", 1)
    st = (st,) * spatial if isinstance(st, int) else st
    pa = geometry.get("padding", 0)
    pa = (pa,) * spatial if isinstance(pa, int) else pa
    di = geometry.get("dilation", 1)
    di = (di,) * spatial if isinstance(di, int) else di
    h2d = d2h = 0
    prev = None
    for ch in plan.chunks:
        assert ch["first_c"] == (ch["c"][0] == 0) and ch["last_c"] == (ch["c"][1] == x_shape[1])
        for d in range(spatial):
            (ob, oe), (ib, ie) = ch["out"][d], ch["in"][d]
            if plan.splits[names[d]] == 1:
                assert (ib, ie) == (0, x_shape[2 + d])
            else:
                assert ib == ob * st[d] - pa[d]
                assert ie - ib == (oe - ob - 1) * st[d] + (w_shape[2 + d] - 1) * di[d] + 1
        if prev is not None:
            assert ch["load_x"] == (not (prev["n"] == ch["n"] and prev["c"] == ch["c"] and prev["in"] == ch["in"]))
            assert ch["load_w"] == (not (prev["k"] == ch["k"] and prev["c"] == ch["c"]))
        else:
            assert ch["load_x"] and ch["load_w"]
        size = lambda r: r[1] - r[0]  # noqa: E731
        if ch["load_x"]:
            h2d += 4 * size(ch["n"]) * size(ch["c"]) * math.prod(size(r) for r in ch["in"])
        if ch["load_w"]:
            h2d += 4 * size(ch["k"]) * size(ch["c"]) * math.prod(w_shape[2:])
        if ch["last_c"]:
            d2h += 4 * size(ch["n"]) * size(ch["k"]) * math.prod(size(r) for r in ch["out"])
        prev = ch
    assert plan.bytes_h2d == h2d
    assert plan.bytes_d2h == d2h


def test_larger_budget_never_predicts_slower():
    """The planner minimises predicted time over the plans that fit: a larger budget admits a
    superset, so its choice can't be predicted slower."""
    x_shape, w_shape, geometry = (3, 5, 21, 17), (6, 5, 3, 3), dict(padding=1)
    limit = smallest_budget(x_shape, w_shape, **geometry)
    prev = None
    while limit < 64 * 1024:
        plan = pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=limit, backend="host", **geometry)
        assert plan.peak_device_bytes <= limit
        if prev is not None:
            assert plan.predicted_seconds <= prev.predicted_seconds * (1 + 1e-6), (limit, str(plan), str(prev))
        prev = plan
        limit = int(limit * 1.1) + 1


def test_plan_is_deterministic_and_matches_run(rng):
    x_shape, w_shape, geometry = (3, 3, 41, 9), (5, 3, 3, 3), dict(padding=1)
    limit, a = find_budget(x_shape, w_shape, set("nkh"), at_least=True, **geometry)
    b = pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=limit, backend="host", **geometry)
    assert str(a) == str(b) and a.chunks == b.chunks
    x, w, _ = random_problem(rng, x_shape, w_shape)
    pyooc.conv_forward(x, w, memory_limit=limit, backend="host", **geometry)
    ran = pyooc.last_stats()["plan"]
    assert str(ran) == str(a) and ran.chunks == a.chunks


def test_bias_and_beta_in_plan():
    base = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), memory_limit="1MiB", backend="host")
    with_bias = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), bias=True, memory_limit="1MiB", backend="host")
    assert "+bias" in str(with_bias) and "+bias" not in str(base)
    scaled = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), alpha=2.0, beta=0.5, memory_limit="1MiB",
                                     backend="host")
    assert "alpha=2 beta=0.5" in str(scaled)


def _plan_key(plan):
    return (plan.splits, plan.tiles, plan.loop_order, plan.num_chunks)


@pytest.mark.parametrize("op", ["forward", "data", "filter"])
def test_pinned_twin_is_the_plan_a_pinned_run_uses(rng, op):
    """plan_*(pinned=True) is what a call with pinned arrays runs (host backend with every array
    treated as pinned), plan_*(pinned=False) what a pageable call runs, and for this problem the two
    differ: pinned arrays pay no host gather/scatter, so the model chooses another split."""
    from conftest import host_direct_access
    x_shape, w_shape, geometry = (4, 8, 40, 40), (8, 8, 3, 3), dict(padding=1)
    dy_shape = (4, 8, 40, 40)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    dy = rng.standard_normal(dy_shape, dtype=np.float32)
    plan_of = {
        "forward": lambda limit, pinned: pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=limit, backend="host",
                                                                 pinned=pinned, **geometry),
        "data": lambda limit, pinned: pyooc.plan_conv_backward_data(dy_shape, w_shape, x_shape, memory_limit=limit,
                                                                    backend="host", pinned=pinned, **geometry),
        "filter": lambda limit, pinned: pyooc.plan_conv_backward_filter(x_shape, dy_shape, w_shape,
                                                                        memory_limit=limit, backend="host",
                                                                        pinned=pinned, **geometry),
    }[op]
    run = {
        "forward": lambda limit: pyooc.conv_forward(x, w, memory_limit=limit, backend="host", **geometry),
        "data": lambda limit: pyooc.conv_backward_data(dy, w, x_shape, memory_limit=limit, backend="host", **geometry),
        "filter": lambda limit: pyooc.conv_backward_filter(x, dy, w_shape, memory_limit=limit, backend="host",
                                                           **geometry),
    }[op]
    limits = [int(2**e) for e in np.arange(12, 24, 0.25)]
    differing = [lim for lim in limits
                 if _try_key(plan_of, lim, True) is not None
                 and _try_key(plan_of, lim, True) != _try_key(plan_of, lim, False)]
    assert differing, "no budget where pinned and pageable plans differ: the pinned twin would prove nothing"
    limit = differing[0]
    run(limit)
    assert _plan_key(pyooc.last_stats()["plan"]) == _plan_key(plan_of(limit, False))
    with host_direct_access():
        run(limit)
    assert _plan_key(pyooc.last_stats()["plan"]) == _plan_key(plan_of(limit, True))


def _try_key(plan_of, limit, pinned):
    try:
        return _plan_key(plan_of(limit, pinned))
    except MemoryError:
        return None
