"""Helpers for the gradient tests (test_conv_backward*.py): float64 references, budgets that force a
split, and one checked call of conv_backward_data / _filter / _bias.

The references are the adjoints of conftest.reference_conv, built from the same strided slabs of the
zero-padded input; test_references_are_adjoints checks them against it in float64."""

import itertools
import math

import numpy as np
import pytest

import pyooc
from conftest import expand, needed_budget, output_shape, rel_err, scan_budget

TOL = 1e-5
OPS = ("data", "filter", "bias")


def _slabs(shape, w_shape, y_shape, stride, padding, dilation):
    """(kernel offset, index of the padded input's slab that offset reads) for every offset."""
    spatial = len(w_shape) - 2
    st, pa, di = expand(stride, spatial), expand(padding, spatial), expand(dilation, spatial)
    for offset in itertools.product(*(range(k) for k in w_shape[2:])):
        yield offset, (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offset, di, y_shape[2:], st))


def _padding(shape, padding):
    spatial = len(shape) - 2
    return expand(padding, spatial)


def reference_backward_data(dy, w, x_shape, stride=1, padding=0, dilation=1, alpha=1.0, beta=0.0, out=None):
    """alpha * conv_transpose(dy, w) + beta * out in float64: each kernel offset scatters w[:, :, offset]
    times dy into the slab of the padded dx it was read from; the padding is cut off at the end."""
    dy = np.asarray(dy, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    pa = _padding(x_shape, padding)
    dxp = np.zeros(tuple(x_shape[:2]) + tuple(n + 2 * p for n, p in zip(x_shape[2:], pa)))
    for offset, slab in _slabs(x_shape, w.shape, dy.shape, stride, padding, dilation):
        dxp[slab] += np.einsum("kc,nk...->nc...", w[(slice(None), slice(None)) + offset], dy, optimize=True)
    dx = alpha * dxp[(slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(pa, x_shape[2:]))]
    if beta != 0.0:
        dx = dx + beta * np.asarray(out, dtype=np.float64)
    return dx


def reference_backward_filter(x, dy, w_shape, stride=1, padding=0, dilation=1, alpha=1.0, beta=0.0, out=None):
    """alpha * dL/dw + beta * out in float64: per kernel offset, dy contracted with the slab of the
    padded x that offset reads, over samples and positions."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    pa = _padding(x.shape, padding)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pa])
    dw = np.zeros(w_shape)
    axes = "xyz"[:x.ndim - 2]
    for offset, slab in _slabs(x.shape, w_shape, dy.shape, stride, padding, dilation):
        dw[(slice(None), slice(None)) + offset] = np.einsum(f"nk{axes},nc{axes}->kc", dy, xp[slab], optimize=True)
    dw *= alpha
    if beta != 0.0:
        dw += beta * np.asarray(out, dtype=np.float64)
    return dw


def reference_backward_bias(dy, alpha=1.0, beta=0.0, out=None):
    dy = np.asarray(dy, dtype=np.float64)
    db = alpha * dy.sum(axis=(0,) + tuple(range(2, dy.ndim)))
    if beta != 0.0:
        db += beta * np.asarray(out, dtype=np.float64)
    return db


def random_backward(rng, x_shape, w_shape, **geometry):
    """float32 x, w and dy (dy shaped like conv_forward's output), O(1) values."""
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(math.sqrt(math.prod(w_shape[1:])))).astype(
        np.float32)
    dy = rng.standard_normal(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    return x, w, dy


# --------------------------------------------------------------------------------------------
# Shapes, plans and budgets per operation


def shapes_of(op, x_shape, w_shape, **geometry):
    """The shape arguments plan_conv_backward_<op> takes, in its order."""
    y_shape = output_shape(x_shape, w_shape, **geometry)
    return {"data": (y_shape, w_shape, x_shape), "filter": (x_shape, y_shape, w_shape), "bias": (y_shape,)}[op]


def plan_backward(op, x_shape, w_shape, *, memory_limit=None, backend="host", alpha=1.0, beta=0.0, **geometry):
    shapes = shapes_of(op, x_shape, w_shape, **geometry)
    if op == "bias":
        return pyooc.plan_conv_backward_bias(*shapes, alpha=alpha, beta=beta, memory_limit=memory_limit,
                                             backend=backend)
    fn = pyooc.plan_conv_backward_data if op == "data" else pyooc.plan_conv_backward_filter
    return fn(*shapes, alpha=alpha, beta=beta, memory_limit=memory_limit, backend=backend, **geometry)


def smallest_backward_budget(op, x_shape, w_shape, backend="host", **geometry):
    """The smallest memory_limit any plan needs."""
    return needed_budget(lambda limit: plan_backward(op, x_shape, w_shape, memory_limit=limit, backend=backend,
                                                     **geometry))


def split_set(plan):
    return frozenset(d for d, pieces in plan.splits.items() if pieces > 1)


def tiled_extents(plan):
    """Extent of every split dimension of a gradient's plan (spatial: dx for data, dy otherwise)."""
    op = plan.operation
    y = plan.y_shape
    spatial = len(y) - 2
    names = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}[spatial]
    out = {"n": y[0], "k": y[1], "c": 1 if op == "conv_backward_bias" else plan.x_shape[1]}
    sizes = plan.x_shape[2:] if op == "conv_backward_data" else y[2:]
    out.update(zip(names, sizes))
    return out


def uneven_dims(plan):
    ext = tiled_extents(plan)
    return frozenset(d for d in split_set(plan) if ext[d] % plan.tiles[d] != 0)


def find_backward_budget(op, x_shape, w_shape, want, *, uneven=False, backend="host", growth=1.04, **geometry):
    """(memory_limit, plan): the first budget, scanning upward from the smallest, whose plan splits
    exactly the dimensions in `want` (and, if `uneven`, one of them with a ragged last tile)."""
    want = frozenset(want)
    ceiling = 4 * 4 * (math.prod(x_shape) + math.prod(w_shape) + math.prod(output_shape(x_shape, w_shape, **geometry)))
    return scan_budget(
        lambda limit: plan_backward(op, x_shape, w_shape, memory_limit=limit, backend=backend, **geometry),
        smallest_backward_budget(op, x_shape, w_shape, backend=backend, **geometry), ceiling + 65536,
        lambda plan: split_set(plan) == want and (not uneven or uneven_dims(plan)),
        f"the {op} planner split exactly {sorted(want)}{' with an uneven edge' if uneven else ''} for "
        f"x{list(x_shape)} w{list(w_shape)} {geometry}", growth)


# --------------------------------------------------------------------------------------------
# Chunk lists


def check_backward_tiling(plan, operation=None):
    """The output tiles cover the output exactly once (on their last chunk), each accumulating its
    reduction exactly once, in consecutive chunks flagged first ... last. operation: read the plan
    as this gradient's (a fused plan built on it)."""
    op = operation or plan.operation
    chunks = plan.chunks
    y = plan.y_shape
    if op == "conv_backward_data":
        final = np.zeros(plan.x_shape, dtype=np.int32)
        reduced = np.zeros(plan.x_shape, dtype=np.int32)
        for ch in chunks:
            region = (slice(*ch["n"]), slice(*ch["c"])) + tuple(slice(*r) for r in ch["dx"])
            reduced[region] += ch["k"][1] - ch["k"][0]
            if ch["last"]:
                final[region] += 1
        assert (reduced == y[1]).all(), "a dx element does not accumulate every k exactly once"
    else:
        outputs = plan.w_shape[:2] if op == "conv_backward_filter" else (y[1],)
        final = np.zeros(outputs, dtype=np.int32)
        reduced = np.zeros(outputs, dtype=np.int64)
        for ch in chunks:
            region = (slice(*ch["k"]), slice(*ch["c"])) if op == "conv_backward_filter" else (slice(*ch["k"]),)
            reduced[region] += (ch["n"][1] - ch["n"][0]) * math.prod(b - a for a, b in ch["dy"])
            if ch["last"]:
                final[region] += 1
        assert (reduced == y[0] * math.prod(y[2:])).all(), "an output does not reduce every (n, position) once"
    assert (final == 1).all(), "some outputs are written back never or more than once"
    # first ... last bracket consecutive chunks of one tile.
    open_tile = False
    for ch in chunks:
        assert ch["first"] != open_tile, "a reduction starts inside another or continues after its end"
        open_tile = not ch["last"]
    assert not open_tile


def expected_backward_traffic(plan, *, direct, beta=0.0, operation=None):
    """(bytes_h2d, bytes_d2h) a run of `plan` moves, from its chunk list. Staged loads move whole
    regions (zeros included); direct ones only what lies inside the tensor or the rows read.
    operation: as for check_backward_tiling."""
    op = operation or plan.operation
    y = plan.y_shape
    size = lambda r: max(r[1] - r[0], 0)  # noqa: E731
    inside = lambda r, n: max(min(r[1], n) - max(r[0], 0), 0)  # noqa: E731
    h2d = 0
    for ch in chunks_with_defaults(plan):
        n, k, c = size(ch["n"]), size(ch["k"]), size(ch["c"])
        if op == "conv_backward_data":
            dy_rows = ch["dy_read"] if direct else ch["dy"]
            dx_rows = ch["dx"] if direct else ch["dx_computed"]
            if ch["load_dy"]:
                h2d += 4 * n * k * math.prod(size(r) for r in dy_rows)
            if ch["load_w"]:
                h2d += 4 * k * c * math.prod(plan.w_shape[2:])
            if ch["first"] and beta != 0.0:
                h2d += 4 * n * c * math.prod(size(r) for r in dx_rows)
        elif op == "conv_backward_filter":
            x_rows = [(inside(r, plan.x_shape[2 + d]) if direct else size(r)) for d, r in enumerate(ch["x"])]
            if ch["load_x"]:
                h2d += 4 * n * c * math.prod(x_rows)
            if ch["load_dy"]:
                h2d += 4 * n * k * math.prod(size(r) for r in ch["dy"])
            if ch["first"] and beta != 0.0:
                h2d += 4 * k * c * math.prod(plan.w_shape[2:])
        else:
            if ch["load_dy"]:
                h2d += 4 * n * k * math.prod(size(r) for r in ch["dy"])
            if ch["first"] and beta != 0.0:
                h2d += 4 * k
    d2h = 4 * {"conv_backward_data": math.prod(plan.x_shape or (0,)), "conv_backward_filter":
               math.prod(plan.w_shape or (0,)), "conv_backward_bias": y[1]}[op]
    return h2d, d2h


def chunks_with_defaults(plan):
    """Chunk dicts with c = (0, 1) filled in for bias plans (which have no c)."""
    for ch in plan.chunks:
        yield {"c": (0, 1), **ch}


# --------------------------------------------------------------------------------------------
# One checked call


def run_backward(op, x, w, dy, *, out=None, alpha=1.0, beta=0.0, memory_limit=None, backend="host", **geometry):
    if op == "data":
        return pyooc.conv_backward_data(dy, w, x.shape, out=out, alpha=alpha, beta=beta, memory_limit=memory_limit,
                                        backend=backend, **geometry)
    if op == "filter":
        return pyooc.conv_backward_filter(x, dy, w.shape, out=out, alpha=alpha, beta=beta,
                                          memory_limit=memory_limit, backend=backend, **geometry)
    return pyooc.conv_backward_bias(dy, out=out, alpha=alpha, beta=beta, memory_limit=memory_limit, backend=backend)


def reference_backward(op, x, w, dy, *, alpha=1.0, beta=0.0, out=None, **geometry):
    if op == "data":
        return reference_backward_data(dy, w, x.shape, alpha=alpha, beta=beta, out=out, **geometry)
    if op == "filter":
        return reference_backward_filter(x, dy, w.shape, alpha=alpha, beta=beta, out=out, **geometry)
    return reference_backward_bias(dy, alpha=alpha, beta=beta, out=out)


def output_shape_of(op, x, w, dy):
    return {"data": x.shape, "filter": w.shape, "bias": dy.shape[1:2]}[op]


def run_backward_checked(op, x, w, dy, *, out=None, alpha=1.0, beta=0.0, memory_limit=None, backend="host",
                         direct=False, tol=TOL, **geometry):
    """A gradient into a NaN-poisoned (or the given) out, checked: numerics against the float64
    reference, inputs unwritten, every output written, last_stats agreeing with its plan and chunk
    list, budget held. Returns the plan."""
    before = [a.copy() for a in (x, w, dy)]
    if out is None:
        out = np.full(output_shape_of(op, x, w, dy), np.nan, dtype=np.float32)
    out_before = out.copy()
    ref = reference_backward(op, x, w, dy, alpha=alpha, beta=beta, out=out_before, **geometry)

    got = run_backward(op, x, w, dy, out=out, alpha=alpha, beta=beta, memory_limit=memory_limit, backend=backend,
                       **geometry)

    assert got is out
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} of {got.size} outputs were never written"
    if op == "bias":
        # db is one long sum per channel: float32 rounding scales with the sum of |terms|, not with
        # |db|, which cancellation can make arbitrarily small. Judge the error against that scale.
        axes = (0,) + tuple(range(2, dy.ndim))
        scale = abs(alpha) * np.abs(dy.astype(np.float64)).sum(axis=axes) + abs(beta) * np.abs(
            np.nan_to_num(out_before.astype(np.float64)))
        err = float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(scale), 1e-300))
    else:
        err = rel_err(got, ref)
    assert err < tol, f"relative error {err:.3e} >= {tol}"
    for a, b in zip((x, w, dy), before):
        assert np.array_equal(a, b), "a gradient call wrote to an input"
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.operation == f"conv_backward_{op}"
    assert plan.backend == backend
    check_backward_tiling(plan)
    assert (stats["bytes_h2d"], stats["bytes_d2h"]) == expected_backward_traffic(plan, direct=direct, beta=beta)
    assert stats["bytes_d2h"] == plan.bytes_d2h
    if direct:
        assert stats["bytes_h2d"] <= plan.bytes_h2d
    else:
        assert stats["bytes_h2d"] == plan.bytes_h2d
    assert stats["chunks"] == plan.num_chunks
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes <= plan.memory_limit
    if memory_limit is not None:
        assert plan.memory_limit == pyooc.parse_memory_limit(memory_limit)
    return plan
