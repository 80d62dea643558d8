"""Shared by the padding_mode tests (host backend: tests/test_padding_mode.py; GPU twins:
tests/test_padding_mode_gpu.py): the cases, torch's own F.pad + convolution in float64 as the
reference (its autograd for the gradients), and budgets from the tightest up, including the first
whose plan splits a spatial dimension unevenly (halos then cross the border in the edge chunks and
interior chunks read none)."""

import ml_dtypes
import numpy as np

import pyooc
from conftest import needed_budget, rel_err
from layout_helpers import empty_channels_last, is_channels_last
from torch_helpers import torch

F = torch.nn.functional
MODES = ("reflect", "replicate", "circular")
DTYPES = {"float32": (np.float32, 1e-5), "float16": (np.float16, 1e-3), "bfloat16": (ml_dtypes.bfloat16, 1e-2)}

# name: x shape, w shape, geometry (pyooc's keywords). Paddings stay below every spatial size (reflect's rule).
CASES = {
    "1d_strided": ((1, 3, 303), (4, 3, 3), dict(stride=2, padding=2)),
    "2d_grouped_dilated": ((1, 4, 23, 19), (6, 2, 3, 2), dict(stride=(1, 2), padding=(2, 1), dilation=(2, 1),
                                                              groups=2)),
    "2d_same_even_kernel": ((1, 3, 21, 17), (4, 3, 4, 3), dict(padding="same", dilation=(1, 2))),
    "3d": ((1, 2, 9, 11, 7), (3, 2, 3, 3, 2), dict(padding=(1, 2, 1))),
    "3d_one_padding_for_every_dimension": ((1, 2, 8, 7, 9), (3, 2, 3, 2, 3), dict(padding=2)),
}


def padding_pairs(x_shape, w_shape, geometry):
    """(before, after) per spatial dimension, as torch's Conv modules pad ("same": total // 2 before)."""
    spatial = len(x_shape) - 2
    padding = geometry.get("padding", 0)
    if padding == "same":
        dilation = geometry.get("dilation", 1)
        dilation = (dilation,) * spatial if isinstance(dilation, int) else dilation
        totals = [d * (k - 1) for d, k in zip(dilation, w_shape[2:])]
        return [(t // 2, t - t // 2) for t in totals]
    padding = (padding,) * spatial if isinstance(padding, int) else padding
    return [(p, p) for p in padding]


def torch_reference(x, w, dy, x_shape, w_shape, geometry, mode):
    """(y, dx, dw) in float64: torch's F.pad(x, pads, mode) then an unpadded convolution, and its
    autograd for dy (None: the forward only)."""
    spatial = len(x_shape) - 2
    conv = getattr(F, f"conv{spatial}d")
    pads = [p for before, after in reversed(padding_pairs(x_shape, w_shape, geometry)) for p in (before, after)]
    xt = torch.tensor(np.asarray(x).astype(np.float64), requires_grad=True)
    wt = torch.tensor(np.asarray(w).astype(np.float64), requires_grad=True)
    y = conv(F.pad(xt, pads, mode=mode), wt, None, geometry.get("stride", 1), 0, geometry.get("dilation", 1),
             geometry.get("groups", 1))
    if dy is None:
        return y.detach().numpy(), None, None
    y.backward(torch.tensor(np.asarray(dy).astype(np.float64)))
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()


def random_inputs(rng, x_shape, w_shape, geometry, dtype):
    """x, w (scaled so y is O(1)) and dy of y's shape, in dtype (fresh normal values)."""
    fan_in = int(np.prod(w_shape[1:]))
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal(w_shape) / np.sqrt(fan_in)).astype(dtype)
    y_shape = pyooc.plan_conv_forward(x_shape, w_shape, backend="host", **geometry).y_shape
    dy = rng.standard_normal(y_shape).astype(dtype)
    return x, w, dy


SPATIAL = ("d", "h", "w")


def spatially_split(plan):
    return any(pieces > 1 for dim, pieces in plan.splits.items() if dim in SPATIAL)


def budgets(plan_at):
    """Budgets from the tightest up (by 1.3): the tightest (many small tiles: edge chunks cross the
    border, interior ones read no padding), the first whose plan splits a spatial dimension into
    tiles of which the last is smaller (uneven), the last that still splits one (few large tiles:
    every chunk reaches a border), and None (one chunk where it fits)."""
    tightest = needed_budget(plan_at)
    limit, uneven, last_split = tightest, None, None
    while limit < 256 * tightest:
        plan = plan_at(limit)
        if not spatially_split(plan):
            break
        last_split = limit
        if uneven is None and any(plan.splits[d] > 1 and extent % plan.tiles[d]
                                  for d, extent in _spatial_extents(plan).items()):
            uneven = limit
        limit = int(limit * 1.3) + 1
    assert last_split == tightest or last_split is not None, "the tightest budget splits no spatial dimension"
    assert uneven is not None, "no budget splits a spatial dimension unevenly"
    return sorted({tightest, uneven, last_split}) + [None]


def _spatial_extents(plan):
    """The extent each spatial plan dimension tiles (y's for forward and filter, x's for data)."""
    shape = plan.x_shape if plan.operation == "conv_backward_data" else plan.y_shape
    return {d: shape[2 + i] for i, d in enumerate(d for d in plan.splits if d in SPATIAL)}


def check_close(got, ref, tol, what):
    got64 = np.asarray(got).astype(np.float64)
    assert not np.isnan(got64).any(), f"{what}: {int(np.isnan(got64).sum())} outputs never written"
    err = rel_err(got64, ref)
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol}"


def run_every_budget(plan_at, call, ref, dtype, tol, what, inputs, channels_last=False):
    """call(limit, out) into a NaN-poisoned out at each of budgets(plan_at): close to ref, within the
    plan's budget, inputs unchanged, out returned. channels_last: out is channels-last, as the
    inputs are, and the result and a fresh one (out=None) keep that layout."""
    before = [a.copy() for a in inputs]
    for limit in budgets(plan_at):
        out = empty_channels_last(ref.shape, dtype) if channels_last else np.full(ref.shape, np.nan, dtype)
        got = call(limit, out)
        assert got is out
        check_close(got, ref, tol, f"{what} at memory_limit={limit}")
        assert pyooc.last_stats()["plan"].peak_device_bytes <= pyooc.last_stats()["plan"].memory_limit
        if channels_last:
            assert is_channels_last(got) and is_channels_last(call(limit, None)), what
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b, "an input was written")


# The convolution's three operations under one name each, and which of torch_reference's (y, dx, dw) each gives.
OPERATIONS = {"forward": 0, "backward filter": 2, "backward data": 1}


def conv_operation(operation, x, w, dy):
    """(plan(**options), run(**options), the inputs it must leave unchanged) of one of OPERATIONS on
    these arrays: the same call the tests make of each, its plan twin with the matching shapes."""
    if operation == "forward":
        return (lambda **o: pyooc.plan_conv_forward(x.shape, w.shape, **o),
                lambda **o: pyooc.conv_forward(x, w, **o), [x, w])
    if operation == "backward filter":
        return (lambda **o: pyooc.plan_conv_backward_filter(x.shape, dy.shape, w.shape, **o),
                lambda **o: pyooc.conv_backward_filter(x, dy, w.shape, **o), [x, dy])
    return (lambda **o: pyooc.plan_conv_backward_data(dy.shape, w.shape, x.shape, **o),
            lambda **o: pyooc.conv_backward_data(dy, w, x.shape, **o), [dy, w])
