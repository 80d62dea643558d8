"""Helpers for the fused-function tests (test_fused_*.py): float64 references built from the
unfused references, the same result composed from pyooc's unfused operations, and one checked call.

A fused function must equal both: the float64 reference (its numerics) and the composition of the
unfused pyooc ops it replaces (its contract), while moving fewer bytes than that composition."""

import math

import numpy as np

import pyooc
from backward_helpers import reference_backward_data, reference_backward_filter
from conftest import (cancellation_floor, expected_traffic, needed_budget, output_shape, reference_conv, rel_err,
                      scan_budget)
from layers_helpers import COEF, ref_activation, ref_activation_grad

TOL = 1e-5
ACTIVATIONS = ["identity", "relu", "sigmoid", "tanh", "clipped_relu", "elu", "swish", "gelu", "leaky_relu"]


def coef_of(activation):
    return None if activation == "identity" else COEF[activation]


def activated(v, activation):
    return np.asarray(v, dtype=np.float64) if activation == "identity" else ref_activation(v, activation,
                                                                                          coef_of(activation))


def activation_err(got, ref, pre, floor=0.0):
    """The error relative to the larger of ||ref|| and the norm before the activation: the
    activations are about 1-Lipschitz, so fp32 rounding before them carries through at that scale,
    also where they saturate (sigmoid(-400) is 0 in fp32, 1e-174 in fp64). `floor`: a least scale
    (cancellation_floor)."""
    ref, pre = np.asarray(ref, dtype=np.float64), np.asarray(pre, dtype=np.float64)
    scale = max(np.linalg.norm(ref), np.linalg.norm(pre), floor, 1e-300)
    return float(np.linalg.norm(np.asarray(got, dtype=np.float64) - ref) / scale)


def random_forward(rng, x_shape, w_shape, **geometry):
    """float32 x, w (scaled so conv is O(1)), bias and z (y's shape)."""
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(w_shape[1:])))).astype(
        np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    z = rng.standard_normal(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    return x, w, b, z


def reference_bias_activation(x, w, b, z, activation, alpha1=1.0, alpha2=0.0, **geometry):
    """(y, pre-activation) in float64."""
    pre = reference_conv(x, w, b, alpha=alpha1, beta=alpha2, out=z, **geometry)
    return activated(pre, activation), pre


def composed_bias_activation(x, w, b, z, activation, alpha1=1.0, alpha2=0.0, memory_limit=None, backend="host",
                             **geometry):
    """The unfused sequence the fused forward replaces: conv_forward, add_tensor (z, bias),
    activation_forward. Returns (y, bytes moved H2D + D2H over the sequence)."""
    moved = 0

    def count():
        nonlocal moved
        stats = pyooc.last_stats()
        moved += stats["bytes_h2d"] + stats["bytes_d2h"]

    y = pyooc.conv_forward(x, w, alpha=alpha1, memory_limit=memory_limit, backend=backend, **geometry)
    count()
    if z is not None and alpha2 != 0.0:
        pyooc.add_tensor(z, y, alpha=alpha2, beta=1.0, out=y, memory_limit=memory_limit, backend=backend)
        count()
    if b is not None:
        pyooc.add_tensor(b.reshape((1, -1) + (1,) * (x.ndim - 2)), y, out=y, memory_limit=memory_limit,
                         backend=backend)
        count()
    if activation != "identity":
        pyooc.activation_forward(y, activation, coef=coef_of(activation), out=y, memory_limit=memory_limit,
                                 backend=backend)
        count()
    return y, moved


def run_bias_activation_checked(x, w, b, z, activation, *, alpha1=1.0, alpha2=0.0, memory_limit=None,
                                backend="host", direct=False, in_place=False, tol=TOL, **geometry):
    """conv_bias_activation_forward into a NaN-poisoned out (or into z, in_place), checked: the
    float64 reference, inputs unwritten, every output written, last_stats agreeing with the plan
    (traffic from its chunk list), budget held. Returns (y, plan)."""
    before = [None if a is None else a.copy() for a in (x, w, b, z)]
    ref, pre = reference_bias_activation(x, w, b, z, activation, alpha1, alpha2, **geometry)
    out = z if in_place else np.full(ref.shape, np.nan, dtype=np.float32)
    y = pyooc.conv_bias_activation_forward(x, w, b, z=z, activation=activation, coef=coef_of(activation),
                                           alpha1=alpha1, alpha2=alpha2, out=out, memory_limit=memory_limit,
                                           backend=backend, **geometry)
    assert y is out
    assert not np.isnan(y).any(), f"{int(np.isnan(y).sum())} of {y.size} outputs were never written"
    err = activation_err(y, ref, pre, cancellation_floor(x, w, b, z, alpha1, alpha2, **geometry))
    assert err < tol, f"relative error {err:.3e} >= {tol}"
    for a, a0 in zip((x, w, b) + (() if in_place else (z,)), before):
        assert a is None or np.array_equal(a, a0), "conv_bias_activation_forward wrote to an input"
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.operation == "conv_bias_activation_forward" and plan.fused
    assert plan.backend == backend
    beta = alpha2 if z is not None else 0.0
    h2d, d2h = expected_traffic(plan, direct=bool(direct), bias=b is not None, beta=beta)
    assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (h2d, d2h), "traffic disagrees with the chunk list"
    if not direct:
        assert stats["bytes_h2d"] == plan.bytes_h2d
    assert stats["bytes_d2h"] == plan.bytes_d2h == y.nbytes, "y crosses back once"
    assert stats["chunks"] == plan.num_chunks
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes <= plan.memory_limit
    return y, plan


# --------------------------------------------------------------------------------------------
# conv_backward_data_filter_bias


def plan_fused_backward(x_shape, w_shape, *, memory_limit=None, backend="host", **geometry):
    dy_shape = output_shape(x_shape, w_shape, **geometry)
    return pyooc.plan_conv_backward_data_filter_bias(x_shape, dy_shape, w_shape, memory_limit=memory_limit,
                                                     backend=backend, **geometry)


def smallest_fused_backward_budget(x_shape, w_shape, backend="host", **geometry):
    return needed_budget(lambda limit: plan_fused_backward(x_shape, w_shape, memory_limit=limit, backend=backend,
                                                           **geometry))


def fused_split_set(plan):
    return frozenset(d for d, pieces in plan.splits.items() if pieces > 1)


def fused_uneven(plan):
    """Split dimensions with a ragged last tile (spatial: of dy)."""
    y = plan.y_shape
    names = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}[len(y) - 2]
    ext = {"n": y[0], "c": plan.x_shape[1], **dict(zip(names, y[2:]))}
    return frozenset(d for d in fused_split_set(plan) if ext[d] % plan.tiles[d] != 0)


def find_fused_backward_budget(x_shape, w_shape, want, *, uneven=False, backend="host", growth=1.04, **geometry):
    """(memory_limit, plan): the first budget from the smallest up whose plan splits exactly `want`
    (and, with uneven, one of them with a ragged last tile)."""
    want = frozenset(want)
    start = smallest_fused_backward_budget(x_shape, w_shape, backend=backend, **geometry)
    return scan_budget(
        lambda limit: plan_fused_backward(x_shape, w_shape, memory_limit=limit, backend=backend, **geometry),
        start, 20 * start, lambda plan: fused_split_set(plan) == want and (not uneven or fused_uneven(plan)),
        f"the fused backward planner split exactly {sorted(want)}{' with an uneven edge' if uneven else ''} for "
        f"x{list(x_shape)} w{list(w_shape)} {geometry}", growth)


def check_fused_backward_chunks(plan):
    """dy tiles cover dy exactly once, each loaded by the first chunk that uses it (then serving
    every c-tile in a row); the written-back dx rows cover dx exactly once."""
    x_shape, y_shape = plan.x_shape, plan.y_shape
    dy_loads = np.zeros((y_shape[0],) + tuple(y_shape[2:]), dtype=np.int32)
    dx_writes = np.zeros(x_shape, dtype=np.int32)
    current, next_c = None, None
    for ch in plan.chunks:
        if ch["load_dy"]:
            assert next_c in (None, x_shape[1]), "a dy tile did not serve every c-tile"
            current, next_c = (ch["n"], ch["dy"]), 0
            dy_loads[(slice(*ch["n"]),) + tuple(slice(*r) for r in ch["dy"])] += 1
        assert (ch["n"], ch["dy"]) == current, "a chunk uses a dy tile it did not load"
        assert ch["c"][0] == next_c
        next_c = ch["c"][1]
        dx_writes[(slice(*ch["n"]), slice(*ch["c"])) + tuple(slice(*r) for r in ch["dx"])] += 1
    assert next_c == x_shape[1]
    assert (dy_loads == 1).all(), "dy must cross the link exactly once"
    assert (dx_writes == 1).all(), "every dx element is written back exactly once"


def expected_fused_backward_traffic(plan, *, direct):
    """(bytes_h2d, bytes_d2h) from the chunk list: dy tiles, x slabs (direct: the part inside x),
    w tiles; dx, dw and db once."""
    x_shape, w_shape, y_shape = plan.x_shape, plan.w_shape, plan.y_shape
    size = lambda r: max(r[1] - r[0], 0)  # noqa: E731
    inside = lambda r, n: max(min(r[1], n) - max(r[0], 0), 0)  # noqa: E731
    h2d = 0
    for ch in plan.chunks:
        n, c = size(ch["n"]), size(ch["c"])
        if ch["load_dy"]:  # dy, and y (and pre) beside it where an activation's backward is folded in
            h2d += 4 * plan.y_inputs * n * y_shape[1] * math.prod(size(r) for r in ch["dy"])
        if ch["load_x"]:
            h2d += 4 * n * c * math.prod(inside(r, x_shape[2 + d]) if direct else size(r) for d, r in enumerate(ch["x"]))
        if ch["load_w"]:
            h2d += 4 * w_shape[0] * c * math.prod(w_shape[2:])
    return h2d, 4 * (math.prod(x_shape) + math.prod(w_shape) + w_shape[0])


def composed_backward(x, w, dy, memory_limit=None, backend="host", **geometry):
    """The unfused sequence: conv_backward_data, _filter, _bias. Returns (dx, dw, db, bytes moved)."""
    moved = 0
    results = []
    for call in (lambda: pyooc.conv_backward_data(dy, w, x.shape, memory_limit=memory_limit, backend=backend,
                                                  **geometry),
                 lambda: pyooc.conv_backward_filter(x, dy, w.shape, memory_limit=memory_limit, backend=backend,
                                                    **geometry),
                 lambda: pyooc.conv_backward_bias(dy, memory_limit=memory_limit, backend=backend)):
        results.append(call())
        stats = pyooc.last_stats()
        moved += stats["bytes_h2d"] + stats["bytes_d2h"]
    return (*results, moved)


def bias_grad_err(got, dy):
    """db's error against the sum of |dy| (backward_helpers: one long sum per channel)."""
    axes = (0,) + tuple(range(2, dy.ndim))
    ref = dy.astype(np.float64).sum(axis=axes)
    scale = np.abs(dy.astype(np.float64)).sum(axis=axes)
    return float(np.linalg.norm(np.asarray(got, dtype=np.float64) - ref) / max(np.linalg.norm(scale), 1e-300))


def check_three_gradients(dx, dw, db, x, w, dz, tol, **geometry):
    """Every output written, and (dx, dw, db) the float64 gradients of the convolution for dz."""
    for grad, a in (("dx", dx), ("dw", dw), ("db", db)):
        assert not np.isnan(a).any(), f"{grad}: {int(np.isnan(a).sum())} of {a.size} outputs were never written"
    err_dx = rel_err(dx, reference_backward_data(dz, w, x.shape, **geometry))
    err_dw = rel_err(dw, reference_backward_filter(x, dz, w.shape, **geometry))
    err_db = bias_grad_err(db, dz)
    assert max(err_dx, err_dw, err_db) < tol, f"relative errors dx {err_dx:.3e} dw {err_dw:.3e} db {err_db:.3e}"


def run_fused_backward_checked(x, w, dy, *, memory_limit=None, backend="host", direct=False, out=None, tol=TOL,
                               activation=None, pre=None, pass_pre=True, **geometry):
    """conv_backward_data_filter_bias into NaN-poisoned outputs (or, with `activation`,
    activation_conv_backward_data_filter_bias for y = act(pre), given y and, if pass_pre, pre),
    checked: the three float64 references (of dz = act'(pre) * dy), inputs unwritten, every output
    written, last_stats against the plan and its chunk list (dy loaded once), budget held. Returns
    ((dx, dw, db), plan)."""
    if out is None:
        out = tuple(np.full(s, np.nan, dtype=np.float32) for s in (x.shape, w.shape, (w.shape[0],)))
    name, dz, inputs = "conv_backward_data_filter_bias", dy, [x, w, dy]
    if activation is None:
        before = [a.copy() for a in inputs]
        dx, dw, db = pyooc.conv_backward_data_filter_bias(x, dy, w, out=out, memory_limit=memory_limit,
                                                          backend=backend, **geometry)
    else:
        name = "activation_" + name
        y = activated(pre, activation).astype(np.float32)
        inputs += [y, pre]
        before = [a.copy() for a in inputs]
        dx, dw, db = pyooc.activation_conv_backward_data_filter_bias(
            x, dy, w, y, activation=activation, coef=coef_of(activation), pre=pre if pass_pre else None, out=out,
            memory_limit=memory_limit, backend=backend, **geometry)
        if activation != "identity":
            dz = ref_activation_grad(pre, dy, activation, coef_of(activation))
    assert all(a is b for a, b in zip((dx, dw, db), out))
    check_three_gradients(dx, dw, db, x, w, dz, tol, **geometry)
    for a, a0 in zip(inputs, before):
        assert np.array_equal(a, a0), f"{name} wrote to an input"
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.operation == name and plan.fused and plan.backend == backend
    check_fused_backward_chunks(plan)
    h2d, d2h = expected_fused_backward_traffic(plan, direct=bool(direct))
    assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (h2d, d2h), "traffic disagrees with the chunk list"
    if not direct:
        assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (plan.bytes_h2d, plan.bytes_d2h)
    assert stats["chunks"] == plan.num_chunks
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes <= plan.memory_limit
    return (dx, dw, db), plan


# --------------------------------------------------------------------------------------------
# conv_bias_activation_pooling_forward


def check_pooling_chunks(plan, pool_kernel, pool_stride, pool_padding):
    """The pooled tiles cover the pooled output once (on their reduction's last chunk); each chunk's
    y rows hold every window of its pooled rows (clipped to y: no window straddles two chunks); the
    c-tiles of a tile cover C once, in a row."""
    x_shape, y_shape = plan.x_shape, plan.y_shape
    spatial = len(y_shape) - 2
    chunks = plan.chunks
    pooled_shape = tuple(ch for ch in _pooled_extents(chunks, spatial))
    written = np.zeros((y_shape[0], y_shape[1]) + pooled_shape, dtype=np.int32)
    c_done = None
    for ch in chunks:
        assert ch["c"][0] == (0 if ch["first_c"] else c_done), "c-tiles out of order"
        c_done = ch["c"][1]
        if ch["last_c"]:
            assert c_done == x_shape[1]
            written[(slice(*ch["n"]), slice(*ch["k"])) + tuple(slice(*r) for r in ch["pooled"])] += 1
        for d in range(spatial):
            (q0, q1), (c0, c1), (y0, y1) = ch["pooled"][d], ch["pooled_computed"][d], ch["y"][d]
            assert c0 <= q0 and q1 <= c1, "the written-back pooled rows are computed"
            for q in range(q0, q1):  # each window of a written-back row lies in the chunk's y rows
                lo = max(q * pool_stride[d] - pool_padding[d], 0)
                hi = min(q * pool_stride[d] - pool_padding[d] + pool_kernel[d], y_shape[2 + d])
                assert y0 <= lo and hi <= y1, f"pooled row {q} straddles the chunk's y rows [{y0}, {y1})"
    assert (written == 1).all(), "every pooled element is written back exactly once"


def _pooled_extents(chunks, spatial):
    return [max(ch["pooled"][d][1] for ch in chunks) for d in range(spatial)]


def expected_pooling_traffic(plan, *, direct, bias, beta):
    """(bytes_h2d, bytes_d2h) from the chunk list: x rows (direct: inside x), w tiles, z's y rows on a
    reduction's first chunk, bias once; the pooled output once."""
    x_shape, w_shape = plan.x_shape, plan.w_shape
    size = lambda r: max(r[1] - r[0], 0)  # noqa: E731
    inside = lambda r, n: max(min(r[1], n) - max(r[0], 0), 0)  # noqa: E731
    h2d = 4 * w_shape[0] if bias else 0
    d2h = 0
    for ch in plan.chunks:
        n, k, c = size(ch["n"]), size(ch["k"]), size(ch["c"])
        if ch["load_x"]:
            h2d += 4 * n * c * math.prod(inside(r, x_shape[2 + d]) if direct else size(r)
                                         for d, r in enumerate(ch["x"]))
        if ch["load_w"]:
            h2d += 4 * k * c * math.prod(w_shape[2:])
        if ch["first_c"] and beta != 0.0:
            h2d += 4 * n * k * math.prod(size(r) for r in ch["y"])
        if ch["last_c"]:
            d2h += 4 * n * k * math.prod(size(r) for r in ch["pooled"])
    return h2d, d2h


# --------------------------------------------------------------------------------------------
# pooling_activation_conv_backward_data_filter_bias


def ref_pool_backward(y, dq, kernel, stride, padding, mode):
    """dy of pool_forward(y) for dq in float64: max routes each window's gradient to its first
    largest element, avg spreads it over the window (by the whole window or, excluding padding, by
    the part inside y)."""
    y = np.asarray(y, dtype=np.float64)
    dy = np.zeros_like(y)
    sd = y.ndim - 2
    for n, c in np.ndindex(*y.shape[:2]):
        for idx in np.ndindex(*dq.shape[2:]):
            sl = tuple(slice(max(i * s - p, 0), min(i * s - p + k, y.shape[2 + d]))
                       for d, (i, k, s, p) in enumerate(zip(idx, kernel, stride, padding)))
            g = float(dq[(n, c) + idx])
            window = y[(n, c) + sl]
            if mode == "max":
                at = np.unravel_index(int(np.argmax(window)), window.shape)
                dy[(n, c) + tuple(s.start + a for s, a in zip(sl, at))] += g
            else:
                count = np.prod(kernel) if mode == "avg" else window.size
                dy[(n, c) + sl] += g / count
    assert sd == len(kernel)
    return dy


def brute_pooled_rows(dy_rows, y_extent, pooled_extent, kernel, stride, whole, padding):
    """(pooled rows, y rows) a dy tile's rows need, found by trying every pooled row (independent of
    the library's pooled_rows): those whose window meets dy_rows, and those windows' y rows."""
    if whole:
        return (0, pooled_extent), (0, y_extent)
    assert padding == 0
    hits = [q for q in range(pooled_extent) if q * stride < dy_rows[1] and q * stride + kernel > dy_rows[0]]
    if not hits:
        return (0, 0), (dy_rows[0], dy_rows[0])
    return (hits[0], hits[-1] + 1), (hits[0] * stride, hits[-1] * stride + kernel)


def run_pooled_backward_checked(x, w, pre, dq_rng, activation, pool, *, pass_pre=True, memory_limit=None,
                                backend="host", direct=False, tol=TOL, **geometry):
    """pooling_activation_conv_backward_data_filter_bias for y = act(pre), q = pool(y) and a random dq,
    into NaN-poisoned outputs, checked: the three float64 references of dz = act'(pre) *
    pool_backward(q, dq, y), inputs unwritten, every output written, traffic against the chunk list
    (dq and q over each tile's pooled rows, y and pre over their windows), budget held. Returns
    ((dx, dw, db), plan)."""
    kernel, stride, padding, mode = pool["pool_kernel"], pool["pool_stride"], pool["pool_padding"], pool["pool_mode"]
    y = activated(pre, activation).astype(np.float32)
    q = pyooc.pool_forward(y, kernel, stride=stride, padding=padding, mode=mode, backend="host")
    dq = dq_rng.standard_normal(q.shape, dtype=np.float32)
    inputs = [x, w, pre, y, q, dq]
    before = [a.copy() for a in inputs]
    out = tuple(np.full(s, np.nan, dtype=np.float32) for s in (x.shape, w.shape, (w.shape[0],)))
    dx, dw, db = pyooc.pooling_activation_conv_backward_data_filter_bias(
        x, dq, w, q, y, activation=activation, coef=coef_of(activation), pre=pre if pass_pre else None, out=out,
        memory_limit=memory_limit, backend=backend, **pool, **geometry)
    dy = ref_pool_backward(y, dq, kernel, stride, padding, mode)
    dz = dy if activation == "identity" else ref_activation_grad(pre, dy, activation, coef_of(activation))
    check_three_gradients(dx, dw, db, x, w, dz, tol, **geometry)
    for a, a0 in zip(inputs, before):
        assert np.array_equal(a, a0), "an input was written"
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.operation == "pooling_activation_conv_backward_data_filter_bias" and plan.pooled_inputs == 2
    check_fused_backward_chunks(plan)
    size = lambda r: max(r[1] - r[0], 0)  # noqa: E731
    inside = lambda r, n: max(min(r[1], n) - max(r[0], 0), 0)  # noqa: E731
    h2d = 0
    for ch in plan.chunks:
        n, c = size(ch["n"]), size(ch["c"])
        if ch["load_dy"]:
            rows = [brute_pooled_rows(r, y.shape[2 + d], q.shape[2 + d], kernel[d], stride[d],
                                      plan.splits[name] == 1, padding[d])
                    for d, (r, name) in enumerate(zip(ch["dy"], list(plan.splits)[3:]))]
            h2d += 4 * n * w.shape[0] * (2 * math.prod(size(p) for p, _ in rows) +
                                         plan.y_inputs * math.prod(size(yr) for _, yr in rows))
        if ch["load_x"]:
            h2d += 4 * n * c * math.prod(inside(r, x.shape[2 + d]) if direct else size(r)
                                         for d, r in enumerate(ch["x"]))
        if ch["load_w"]:
            h2d += 4 * w.shape[0] * c * math.prod(w.shape[2:])
    assert stats["bytes_h2d"] == h2d, "traffic disagrees with the chunk list"
    if not direct:
        assert stats["bytes_h2d"] == plan.bytes_h2d
    assert stats["bytes_d2h"] == plan.bytes_d2h == dx.nbytes + dw.nbytes + db.nbytes
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes <= plan.memory_limit
    return (dx, dw, db), plan
