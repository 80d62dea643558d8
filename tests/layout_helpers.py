"""Helpers for the channels-last tests (test_channels_last*.py): arrays in either layout, the
float64 references of the convolution and its gradients (grouped, from test_grouped_conv's
group-by-group forms), and the budgets that split a call every way."""

import ml_dtypes
import numpy as np

from conftest import needed_budget

# dtype name -> (dtype, tolerance of the norm): float32 exact to rounding, halves as test_half_precision.
DTYPES = {"float32": (np.float32, 1e-5), "float16": (np.float16, 2e-3), "bfloat16": (ml_dtypes.bfloat16, 1.5e-2)}


def dense_order(ndim):
    """Channels-last memory order of an [N, C, *spatial] array: N, spatial..., C."""
    return (0,) + tuple(range(2, ndim)) + (1,)


def channels_last(a):
    """A channels-last copy of `a` with a's logical shape (what torch's .numpy() of a
    channels_last tensor gives)."""
    order = dense_order(a.ndim)
    return np.ascontiguousarray(a.transpose(order)).transpose(np.argsort(order))


def empty_channels_last(shape, dtype, fill=np.nan):
    """An uninitialised-looking (NaN-filled) channels-last array of logical `shape`."""
    order = dense_order(len(shape))
    return np.full(tuple(shape[d] for d in order), fill, dtype=dtype).transpose(np.argsort(order))


def is_channels_last(a):
    """a's strides are exactly channels-last for its shape (size-1 dims aside: a depthwise w, one
    channel a group, is both layouts at once; otherwise this excludes C-contiguous)."""
    expected = channels_last(np.empty(a.shape, a.dtype)).strides
    return all(s == e for n, s, e in zip(a.shape, a.strides, expected) if n != 1)


def up(a):
    return np.asarray(a).astype(np.float64)


def budgets(*plan_ats):
    """From the tightest budget up to an unsplit call: the tight ones split N, C or K and space
    with uneven edges. Given several operations' planners, the tightest that fits all of them (a
    cuda channels-last 3-D chunk reserves room for channels-first copies of its own tensors, so the
    forward and backward data of one problem need different budgets)."""
    needed = max(needed_budget(plan_at) for plan_at in plan_ats)
    return [needed, int(needed * 1.6), int(needed * 3), None]
