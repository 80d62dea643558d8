"""Padding as torch gives it: "valid", "same" (odd and even dilated kernels: an even one pads one
more after than before, as torch), and explicit (before, after) pairs, for conv_forward and its
gradients, against float64 references on the explicitly zero-padded input, on fresh random inputs
with NaN-poisoned outputs under budgets from the tightest up (spatial splits included); and the
padding torch refuses, refused in torch's words."""

import numpy as np
import pytest

import pyooc
from backward_helpers import reference_backward_data, reference_backward_filter
from conftest import needed_budget, random_problem, reference_conv, rel_err

TOL = 1e-5


def torch_same(kernel, dilation):
    """(before, after) per dimension for padding="same": torch pads total // 2 before."""
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return [(t // 2, t - t // 2) for t in totals]


def padded(x, pairs):
    return np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(pairs))


CASES = {  # x shape, w shape, dilation, groups
    "even_1d": ((2, 3, 31), (4, 3, 4), (1,), 1),
    "even_and_odd_2d": ((2, 3, 12, 11), (5, 3, 2, 3), (1, 1), 1),
    "even_dilated_3d_grouped": ((1, 4, 6, 7, 8), (4, 2, 2, 3, 4), (2, 1, 1), 2),
    "odd_2d": ((2, 2, 9, 10), (3, 2, 3, 5), (1, 2), 1),
}


def _budgets(plan_at):
    needed = needed_budget(plan_at)
    return [needed, int(needed * 2), None]


@pytest.mark.parametrize("case", CASES)
def test_forward_same(rng, case):
    x_shape, w_shape, dilation, groups = CASES[case]
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    pairs = torch_same(w_shape[2:], dilation)
    cg, kg = x_shape[1] // groups, w_shape[0] // groups
    xp = padded(x, pairs)
    ref = np.concatenate([reference_conv(xp[:, g * cg:(g + 1) * cg], w[g * kg:(g + 1) * kg], b[g * kg:(g + 1) * kg],
                                         dilation=dilation) for g in range(groups)], axis=1)
    assert ref.shape[2:] == x_shape[2:], "same keeps the spatial size"
    plan_at = lambda m: pyooc.plan_conv_forward(x_shape, w_shape, bias=True, padding="same", dilation=dilation,  # noqa
                                                groups=groups, memory_limit=m, backend="host")
    for limit in _budgets(plan_at):
        out = np.full(ref.shape, np.nan, np.float32)
        y = pyooc.conv_forward(x, w, b, padding="same", dilation=dilation, groups=groups, out=out, memory_limit=limit,
                               backend="host")
        assert not np.isnan(y).any()
        assert rel_err(y, ref) < TOL, (limit, str(pyooc.last_stats()["plan"]))
    # The same as the explicit pairs.
    y_pairs = pyooc.conv_forward(x, w, b, padding=pairs, dilation=dilation, groups=groups, backend="host")
    np.testing.assert_array_equal(y_pairs, pyooc.conv_forward(x, w, b, padding="same", dilation=dilation,
                                                               groups=groups, backend="host"))


@pytest.mark.parametrize("case", CASES)
def test_gradients_with_same(rng, case):
    x_shape, w_shape, dilation, groups = CASES[case]
    if groups != 1:
        pytest.skip("grouped gradients: tests/test_grouped_conv.py; here the padding")
    x, w, _ = random_problem(rng, x_shape, w_shape)
    pairs = torch_same(w_shape[2:], dilation)
    dy = rng.standard_normal((x_shape[0], w_shape[0], *x_shape[2:]), dtype=np.float32)
    xp_shape = padded(x, pairs).shape
    crop = (slice(None), slice(None)) + tuple(slice(b, b + n) for (b, _), n in zip(pairs, x_shape[2:]))
    ref_dx = reference_backward_data(dy, w, xp_shape, dilation=dilation)[crop]
    ref_dw = reference_backward_filter(padded(x, pairs), dy, w_shape, dilation=dilation)
    geometry = dict(padding="same", dilation=dilation, backend="host")
    for limit in _budgets(lambda m: pyooc.plan_conv_backward_data(dy.shape, w_shape, x_shape, memory_limit=m,
                                                                  **geometry)):
        out = np.full(x_shape, np.nan, np.float32)
        dx = pyooc.conv_backward_data(dy, w, x_shape, out=out, memory_limit=limit, **geometry)
        assert not np.isnan(dx).any()
        assert rel_err(dx, ref_dx) < TOL, (limit, str(pyooc.last_stats()["plan"]))
    for limit in _budgets(lambda m: pyooc.plan_conv_backward_filter(x_shape, dy.shape, w_shape, memory_limit=m,
                                                                    **geometry)):
        out = np.full(w_shape, np.nan, np.float32)
        dw = pyooc.conv_backward_filter(x, dy, w_shape, out=out, memory_limit=limit, **geometry)
        assert not np.isnan(dw).any()
        assert rel_err(dw, ref_dw) < TOL, (limit, str(pyooc.last_stats()["plan"]))


def test_valid_is_no_padding(rng):
    x, w, _ = random_problem(rng, (2, 3, 10, 9), (4, 3, 3, 2))
    np.testing.assert_array_equal(pyooc.conv_forward(x, w, padding="valid", backend="host"),
                                  pyooc.conv_forward(x, w, padding=0, backend="host"))


def test_pairs_pad_each_end_by_its_own(rng):
    x, w, _ = random_problem(rng, (2, 3, 10, 9), (4, 3, 3, 3))
    pairs = [(2, 0), (0, 3)]
    y = pyooc.conv_forward(x, w, padding=pairs, stride=(2, 1), backend="host")
    ref = reference_conv(padded(x, pairs), w, stride=(2, 1))
    assert y.shape == ref.shape
    assert rel_err(y, ref) < TOL
    plan = pyooc.plan_conv_forward(x.shape, w.shape, padding=pairs, stride=(2, 1), backend="host")
    assert "padding_after=[0, 3]" in str(plan)


def test_same_plans_keep_the_spatial_size_and_cache():
    plan = pyooc.plan_conv_forward((1, 2, 16, 16), (2, 2, 4, 4), padding="same", backend="host")
    assert plan.y_shape == (1, 2, 16, 16)


@pytest.mark.parametrize("call,exc,pattern", [
    (lambda x, w: pyooc.conv_forward(x, w, padding="same", stride=2, backend="host"), ValueError,
     r"^padding='same' is not supported for strided convolutions$"),
    (lambda x, w: pyooc.conv_forward(x, w, padding="full", backend="host"), ValueError,
     r"Invalid padding string 'full', should be one of \{'valid', 'same'\}"),
    (lambda x, w: pyooc.conv_forward(x, w, padding=[(1, 2, 3), 0], backend="host"), ValueError,
     r"padding: each entry is an int or a \(before, after\) pair"),
    (lambda x, w: pyooc.conv_forward(x, w, padding=[(1, -1), 0], backend="host"), ValueError,
     r"negative padding is not supported"),
    (lambda x, w: pyooc.deconv_bias_activation_forward(x, w.transpose(1, 0, 2, 3).copy(), padding="same",
                                                       backend="host"), ValueError, r"padding='same' is not supported"),
    (lambda x, w: pyooc.conv_backward_data_filter_bias(x, np.zeros((2, 4, 8, 8), np.float32), w[:, :, :2, :2].copy(),
                                                       padding="same", backend="host"),
     NotImplementedError, r"asymmetric padding"),
])
def test_refused_padding(rng, call, exc, pattern):
    x, w, _ = random_problem(rng, (2, 4, 8, 8), (4, 4, 3, 3))
    with pytest.raises(exc, match=pattern):
        call(x, w)
