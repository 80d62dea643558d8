"""Grouped and depthwise convolution (groups > 1) through the public API: conv_forward,
conv_backward_data, conv_backward_filter, the transposed and fused forward forms, against float64
references built group by group from the ungrouped ones (each group's channels sliced out), on
fresh random inputs with NaN-poisoned outputs, under budgets from the tightest up; the plans split
along groups and inside them; bad groups arguments are refused naming them."""

import numpy as np
import pytest

import pyooc
from backward_helpers import reference_backward_data, reference_backward_filter
from conftest import needed_budget, output_shape, random_problem, reference_conv, rel_err

TOL = 1e-5

# (x shape, w shape, groups, stride, padding, dilation)
CASES = {
    "two_groups_1d": ((3, 4, 40), (6, 2, 3), 2, 1, 1, 1),
    "three_groups_2d_strided": ((2, 6, 11, 9), (9, 2, 3, 3), 3, (2, 1), (1, 0), (1, 2)),
    "five_groups_3d": ((2, 10, 5, 6, 7), (10, 2, 3, 3, 3), 5, 1, 1, 1),
    "depthwise_2d": ((2, 7, 12, 10), (7, 1, 3, 3), 7, 1, 1, 1),
    "depthwise_multiplier_3d": ((1, 4, 6, 7, 8), (12, 1, 3, 3, 3), 4, (1, 2, 1), 1, 1),
}


def _blocks(channels, groups):
    size = channels // groups
    return [slice(g * size, (g + 1) * size) for g in range(groups)]


def grouped_forward(x, w, groups, bias=None, **geometry):
    """y group by group: output block g = conv(input block g, filters of block g) + its biases."""
    return np.concatenate([reference_conv(x[:, xc], w[wk], None if bias is None else bias[wk], **geometry)
                           for xc, wk in zip(_blocks(x.shape[1], groups), _blocks(w.shape[0], groups))], axis=1)


def grouped_backward_data(dy, w, x_shape, groups, **geometry):
    cg = x_shape[1] // groups
    return np.concatenate([reference_backward_data(dy[:, yk], w[yk], (x_shape[0], cg, *x_shape[2:]), **geometry)
                           for yk in _blocks(w.shape[0], groups)], axis=1)


def grouped_backward_filter(x, dy, w_shape, groups, **geometry):
    kg = w_shape[0] // groups
    return np.concatenate([reference_backward_filter(x[:, xc], dy[:, yk], (kg, *w_shape[1:]), **geometry)
                           for xc, yk in zip(_blocks(x.shape[1], groups), _blocks(w_shape[0], groups))], axis=0)


def _geometry(case):
    _, _, _, stride, padding, dilation = CASES[case]
    return dict(stride=stride, padding=padding, dilation=dilation)


def _budgets(plan_at):
    needed = needed_budget(plan_at)
    return [needed, int(needed * 1.7), int(needed * 3), None]


@pytest.mark.parametrize("case", CASES)
def test_forward_matches_the_grouped_reference(rng, case):
    x_shape, w_shape, groups, *_ = CASES[case]
    geometry = _geometry(case)
    x, w, b = random_problem(rng, x_shape, w_shape, bias=True)
    ref = grouped_forward(x, w, groups, bias=b, **geometry)
    x0, w0 = x.copy(), w.copy()
    for limit in _budgets(lambda m: pyooc.plan_conv_forward(x_shape, w_shape, bias=True, groups=groups,
                                                            memory_limit=m, backend="host", **geometry)):
        out = np.full(ref.shape, np.nan, dtype=np.float32)
        y = pyooc.conv_forward(x, w, b, groups=groups, out=out, memory_limit=limit, backend="host", **geometry)
        assert y is out
        assert not np.isnan(y).any(), f"unwritten outputs under memory_limit {limit}"
        assert rel_err(y, ref) < TOL, (limit, str(pyooc.last_stats()["plan"]))
        stats = pyooc.last_stats()
        assert stats["bytes_h2d"] == stats["plan"].bytes_h2d and stats["bytes_d2h"] == stats["plan"].bytes_d2h
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


@pytest.mark.parametrize("case", CASES)
def test_forward_blends_alpha_and_beta(rng, case):
    x_shape, w_shape, groups, *_ = CASES[case]
    geometry = _geometry(case)
    x, w, _ = random_problem(rng, x_shape, w_shape)
    y_old = rng.standard_normal(output_shape(x_shape, w_shape, **geometry),
                                dtype=np.float32)
    ref = -0.75 * grouped_forward(x, w, groups, **geometry) + 1.25 * y_old
    limit = needed_budget(lambda m: pyooc.plan_conv_forward(x_shape, w_shape, groups=groups, beta=1.25, memory_limit=m,
                                                            backend="host", **geometry))
    y = y_old.copy()
    pyooc.conv_forward(x, w, groups=groups, alpha=-0.75, beta=1.25, out=y, memory_limit=limit, backend="host",
                       **geometry)
    assert rel_err(y, ref) < TOL


@pytest.mark.parametrize("op", ["data", "filter"])
@pytest.mark.parametrize("case", CASES)
def test_gradients_match_the_grouped_reference(rng, case, op):
    x_shape, w_shape, groups, *_ = CASES[case]
    geometry = dict(_geometry(case), groups=groups, backend="host")
    x, w, _ = random_problem(rng, x_shape, w_shape)
    dy = rng.standard_normal(output_shape(x_shape, w_shape, **_geometry(case)), dtype=np.float32)
    if op == "data":
        ref, shape = grouped_backward_data(dy, w, x_shape, groups, **_geometry(case)), x_shape
        plan_at = lambda m: pyooc.plan_conv_backward_data(dy.shape, w_shape, x_shape, memory_limit=m,  # noqa: E731
                                                          **geometry)
        run = lambda out, m: pyooc.conv_backward_data(dy, w, x_shape, out=out, memory_limit=m, **geometry)  # noqa
    else:
        ref, shape = grouped_backward_filter(x, dy, w_shape, groups, **_geometry(case)), w_shape
        plan_at = lambda m: pyooc.plan_conv_backward_filter(x_shape, dy.shape, w_shape, memory_limit=m,  # noqa: E731
                                                            **geometry)
        run = lambda out, m: pyooc.conv_backward_filter(x, dy, w_shape, out=out, memory_limit=m, **geometry)  # noqa
    for limit in _budgets(plan_at):
        got = run(np.full(shape, np.nan, dtype=np.float32), limit)
        assert not np.isnan(got).any()
        assert rel_err(got, ref) < TOL, (limit, str(pyooc.last_stats()["plan"]))


def test_plans_split_along_groups_and_inside_them():
    """Tight budgets split the groups; tighter ones, one group's channels; plans name the split."""
    x_shape, w_shape = (2, 16, 24, 24), (32, 4, 3, 3)
    plan_at = lambda m: pyooc.plan_conv_forward(x_shape, w_shape, groups=4, padding=1, memory_limit=m,  # noqa: E731
                                                backend="host")
    seen = set()
    needed = needed_budget(plan_at)
    for factor in (1.0, 1.3, 2.0, 4.0, 8.0, 16.0):
        plan = plan_at(int(needed * factor))
        splits = plan.splits
        if splits["groups"] > 1:
            seen.add("groups")
        if splits["k"] > 1 or splits["c"] > 1:
            seen.add("inside a group")
        assert plan.num_chunks == np.prod(list(splits.values()))
        assert "groups=" in str(plan) and plan.tiles["groups"] >= 1
    assert "groups" in seen


def test_depthwise_plan_streams_each_tensor_once_when_it_fits():
    x_shape, w_shape = (2, 8, 20, 20), (8, 1, 3, 3)
    plan = pyooc.plan_conv_forward(x_shape, w_shape, groups=8, padding=1, backend="host")
    es = 4
    assert plan.num_chunks == 1
    assert plan.bytes_h2d == (np.prod(x_shape) + np.prod(w_shape)) * es
    assert plan.bytes_d2h == np.prod((2, 8, 20, 20)) * es


def test_transposed_convolution_with_groups(rng):
    """deconv_bias_activation_forward with groups: conv_transpose's weight is [C_in, C_out / groups, k...]."""
    x = rng.standard_normal((2, 6, 7, 8), dtype=np.float32)
    w = rng.standard_normal((6, 2, 3, 3), dtype=np.float32) / 4
    b = rng.standard_normal(6, dtype=np.float32)
    y_shape = (2, 6, 15, 17)
    ref = grouped_backward_data(x, w, y_shape, 3, stride=2, padding=0) + b.reshape(1, -1, 1, 1).astype(np.float64)
    ref = np.maximum(ref, 0)
    y = pyooc.deconv_bias_activation_forward(x, w, b, activation="relu", stride=2, groups=3, backend="host",
                                             memory_limit=needed_budget(lambda m: pyooc.plan_deconv_bias_activation_forward(
                                                 x.shape, w.shape, groups=3, stride=2, memory_limit=m,
                                                 backend="host")) * 2)
    assert y.shape == y_shape
    assert rel_err(y, ref) < TOL


def test_fused_forward_with_groups(rng):
    x, w, b = random_problem(rng, (2, 6, 10, 10), (6, 2, 3, 3), bias=True)
    ref = np.maximum(grouped_forward(x, w, 3, bias=b, padding=1), 0)
    limit = needed_budget(lambda m: pyooc.plan_conv_bias_activation_forward(x.shape, w.shape, groups=3, padding=1,
                                                                            memory_limit=m, backend="host"))
    y = pyooc.conv_bias_activation_forward(x, w, b, activation="relu", padding=1, groups=3, memory_limit=limit,
                                           backend="host")
    assert rel_err(y, ref) < TOL


def test_fused_backward_refuses_groups_naming_what_serves_them(rng):
    x, w, _ = random_problem(rng, (2, 4, 8, 8), (4, 2, 3, 3))
    dy = rng.standard_normal((2, 4, 6, 6), dtype=np.float32)
    with pytest.raises(NotImplementedError, match=r"groups > 1 is not supported yet.*conv_backward_data"):
        pyooc.conv_backward_data_filter_bias(x, dy, w, groups=2, backend="host")


@pytest.mark.parametrize("x_shape,w_shape,groups,pattern", [
    ((2, 4, 8, 8), (3, 2, 3, 3), 2, r"Given groups=2, expected w to be divisible by 2 at dimension 0"),
    ((2, 6, 8, 8), (4, 2, 3, 3), 2, r"Given groups=2, w of size \[4, 2, 3, 3\], expected x\[2, 6, 8, 8\] to have 4 "
                                    r"channels, but got 6"),
    ((2, 4, 8, 8), (4, 4, 3, 3), 4, r"expected x\[2, 4, 8, 8\] to have 16 channels"),
])
def test_bad_groups_are_refused_naming_them(rng, x_shape, w_shape, groups, pattern):
    x, w, _ = random_problem(rng, x_shape, w_shape)
    with pytest.raises(ValueError, match=pattern):
        pyooc.conv_forward(x, w, groups=groups, backend="host")
    with pytest.raises(ValueError, match=pattern):
        pyooc.plan_conv_forward(x_shape, w_shape, groups=groups, backend="host")
