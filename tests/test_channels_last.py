"""Channels-last (NHWC / NDHWC) arrays through the convolution and its gradients on the host backend
(docs/layouts.md): arrays of logical shape [N, C, *spatial] with channels-last strides go in
zero-copy and the results come back channels-last, equal to float64 references computed on
channels-first copies, for every dtype, groups 1 and > 1 and spatial ranks 1 to 3 (and the
element-wise layers, activation and add_tensor with its broadcast bias, and pooling), into
NaN-poisoned out= arrays, under budgets from the tightest (N, C, K and spatial splits, uneven
edges) up; also by direct DMA (the pinned path's strided copies). Mixed layouts, out= in the wrong
layout and other strides are refused naming the argument; the operations that do not serve
channels-last yet say so (NotImplementedError); plans are keyed and described by layout."""

import numpy as np
import pytest

import pyooc
from conftest import extents, host_direct_access, needed_budget, rel_err, split_set
from layers_helpers import ref_pool, ref_pool_grad
from layout_helpers import DTYPES, budgets, channels_last, empty_channels_last, is_channels_last, up
from test_grouped_conv import grouped_backward_data, grouped_backward_filter, grouped_forward

# (x shape, w shape, groups, stride, padding, dilation): ranks 1-3, groups 1 and > 1.
CASES = {
    "1d": ((3, 5, 23), (4, 5, 3), 1, 1, 1, 1),
    "1d_groups": ((2, 6, 19), (9, 2, 4), 3, 2, 1, 1),
    "2d": ((3, 6, 11, 9), (5, 6, 3, 3), 1, 1, 1, 1),
    "2d_groups_strided": ((2, 6, 13, 10), (8, 3, 3, 2), 2, (2, 1), (1, 0), (1, 2)),
    "2d_depthwise": ((2, 5, 9, 8), (5, 1, 3, 3), 5, 1, 1, 1),
    "3d": ((2, 4, 6, 7, 5), (5, 4, 3, 3, 2), 1, 1, (1, 1, 0), 1),
    "3d_groups": ((2, 6, 5, 6, 7), (6, 2, 3, 1, 3), 3, 1, 1, (1, 1, 2)),
}


def geometry(case):
    _, _, _, stride, padding, dilation = CASES[case]
    return dict(stride=stride, padding=padding, dilation=dilation)


def problem(rng, case, dtype):
    """Channels-first x, w, dy, bias (values exact in dtype) and their channels-last copies."""
    x_shape, w_shape, groups, *_ = CASES[case]
    ref_y = grouped_forward(np.zeros(x_shape), np.zeros(w_shape), groups, **geometry(case))
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(dtype)
    dy = rng.standard_normal(ref_y.shape).astype(dtype)
    bias = rng.standard_normal(w_shape[0]).astype(dtype)
    return x, w, dy, bias, groups


def check_result(result, out, ref, tol, what):
    assert result is out, f"{what}: out= was not the array written"
    assert is_channels_last(result), f"{what}: result strides {result.strides} are not channels-last"
    assert not np.isnan(up(result)).any(), f"{what}: unwritten outputs"
    assert rel_err(up(result), ref) < tol, what


def unchanged(*pairs):
    for before, after in pairs:
        assert np.array_equal(up(before), up(after), equal_nan=True)


def check_under_budgets(plan_at, call, ref, dtype, tol, what):
    """call(out, memory_limit) into a NaN-poisoned channels-last out= under every budget of
    budgets(plan_at): the result is out, channels-last, wholly written and equal to ref."""
    for limit in budgets(plan_at):
        out = empty_channels_last(ref.shape, dtype)
        check_result(call(out, limit), out, ref, tol, f"{what} at {limit}")


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_forward(rng, case, name):
    dtype, tol = DTYPES[name]
    x, w, _, bias, groups = problem(rng, case, dtype)
    ref = grouped_forward(up(x), up(w), groups, up(bias), **geometry(case))
    xl, wl = channels_last(x), channels_last(w)
    plan_at = lambda m: pyooc.plan_conv_forward(x.shape, w.shape, bias=True, groups=groups, dtype=name,  # noqa: E731
                                                memory_limit=m, backend="host", layout="channels_last",
                                                **geometry(case))
    check_under_budgets(plan_at, lambda out, m: pyooc.conv_forward(xl, wl, bias, groups=groups, out=out, memory_limit=m,
                                                                   backend="host", **geometry(case)),
                        ref, dtype, tol, f"{case} {name}")
    fresh = pyooc.conv_forward(xl, wl, bias, groups=groups, memory_limit=budgets(plan_at)[0], backend="host",
                               **geometry(case))
    assert is_channels_last(fresh) and rel_err(up(fresh), ref) < tol
    unchanged((x, xl), (w, wl))


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_backward_data(rng, case, name):
    dtype, tol = DTYPES[name]
    x, w, dy, _, groups = problem(rng, case, dtype)
    ref = grouped_backward_data(up(dy), up(w), x.shape, groups, **geometry(case))
    dyl, wl = channels_last(dy), channels_last(w)
    plan_at = lambda m: pyooc.plan_conv_backward_data(dy.shape, w.shape, x.shape, groups=groups,  # noqa: E731
                                                      dtype=name, memory_limit=m, backend="host",
                                                      layout="channels_last", **geometry(case))
    check_under_budgets(plan_at, lambda out, m: pyooc.conv_backward_data(dyl, wl, x.shape, groups=groups, out=out,
                                                                         memory_limit=m, backend="host",
                                                                         **geometry(case)),
                        ref, dtype, tol, f"{case} {name}")
    unchanged((dy, dyl), (w, wl))


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_backward_filter_and_bias(rng, case, name):
    dtype, tol = DTYPES[name]
    x, w, dy, _, groups = problem(rng, case, dtype)
    ref = grouped_backward_filter(up(x), up(dy), w.shape, groups, **geometry(case))
    ref_db = up(dy).sum(axis=(0,) + tuple(range(2, dy.ndim)))
    xl, dyl = channels_last(x), channels_last(dy)
    plan_at = lambda m: pyooc.plan_conv_backward_filter(x.shape, dy.shape, w.shape, groups=groups,  # noqa: E731
                                                        dtype=name, memory_limit=m, backend="host",
                                                        layout="channels_last", **geometry(case))
    check_under_budgets(plan_at, lambda out, m: pyooc.conv_backward_filter(xl, dyl, w.shape, groups=groups, out=out,
                                                                           memory_limit=m, backend="host",
                                                                           **geometry(case)),
                        ref, dtype, tol, f"{case} {name}")
    bias_at = lambda m: pyooc.plan_conv_backward_bias(dy.shape, dtype=name, memory_limit=m,  # noqa: E731
                                                      backend="host", layout="channels_last")
    for limit in budgets(bias_at):
        db = pyooc.conv_backward_bias(dyl, memory_limit=limit, backend="host")
        assert db.shape == (w.shape[0],) and rel_err(up(db), ref_db) < tol, (case, name, limit)
    unchanged((x, xl), (dy, dyl))


def test_tight_budgets_split_every_dimension_unevenly():
    """The budgets the tests above run under split N, C, K and space, with ragged last tiles."""
    for case in ("2d", "3d_groups"):
        x_shape, w_shape, groups, *_ = CASES[case]
        fwd = lambda m: pyooc.plan_conv_forward(x_shape, w_shape, bias=True, groups=groups,  # noqa: E731
                                                memory_limit=m, backend="host", layout="channels_last",
                                                **geometry(case))
        plans = [fwd(limit) for limit in budgets(fwd)[:-1]]
        seen = set().union(*(split_set(p) for p in plans))
        # K splits across groups or inside them
        assert {"n", "c"} <= seen and seen & {"k", "groups"} and seen & {"d", "h", "w"}, (case, seen)
        assert any(extents(p)[d] % p.tiles[d] for p in plans for d in split_set(p) - {"groups"}), case


def test_plans_are_kept_per_layout_and_say_so():
    x_shape, w_shape = (2, 4, 9, 9), (4, 4, 3, 3)
    first = pyooc.plan_conv_forward(x_shape, w_shape, padding=1, memory_limit=1 << 14, backend="host")
    last = pyooc.plan_conv_forward(x_shape, w_shape, padding=1, memory_limit=1 << 14, backend="host",
                                   layout="channels_last")
    assert "channels_last" in str(last) and "channels_last" not in str(first)
    assert first.tiles == last.tiles  # the same boxes, in either layout
    with pytest.raises(ValueError, match="^layout must be one of"):
        pyooc.plan_conv_forward(x_shape, w_shape, layout="nhwc")


@pytest.mark.parametrize("case", ["2d_groups_strided", "3d"])
def test_direct_dma_path(rng, case):
    """Pinned memory moves by strided DMA copies: the permuted boxes must make the same chunks."""
    x, w, dy, bias, groups = problem(rng, case, np.float32)
    ref = grouped_forward(up(x), up(w), groups, up(bias), **geometry(case))
    ref_dx = grouped_backward_data(up(dy), up(w), x.shape, groups, **geometry(case))
    plan_at = lambda m: pyooc.plan_conv_forward(x.shape, w.shape, bias=True, groups=groups,  # noqa: E731
                                                memory_limit=m, backend="host", pinned=True, **geometry(case))
    with host_direct_access():
        for limit in budgets(plan_at)[:2]:
            out = empty_channels_last(ref.shape, np.float32)
            y = pyooc.conv_forward(channels_last(x), channels_last(w), bias, groups=groups, out=out,
                                   memory_limit=limit, backend="host", **geometry(case))
            check_result(y, out, ref, 1e-5, f"{case} direct at {limit}")
            out = empty_channels_last(x.shape, np.float32)
            dx = pyooc.conv_backward_data(channels_last(dy), channels_last(w), x.shape, groups=groups, out=out,
                                          memory_limit=limit, backend="host", **geometry(case))
            check_result(dx, out, ref_dx, 1e-5, f"{case} direct dx at {limit}")


def test_alpha_beta_blend_into_a_channels_last_out(rng):
    x, w, dy, _, groups = problem(rng, "2d", np.float32)
    prior = rng.standard_normal((x.shape[0], w.shape[0], 11, 9)).astype(np.float32)
    ref = -0.5 * grouped_forward(up(x), up(w), 1, **geometry("2d")) + 1.5 * up(prior)
    out = channels_last(prior)
    limit = needed_budget(lambda m: pyooc.plan_conv_forward(x.shape, w.shape, beta=1.5, memory_limit=m,
                                                            backend="host", **geometry("2d")))
    y = pyooc.conv_forward(channels_last(x), channels_last(w), alpha=-0.5, beta=1.5, out=out, memory_limit=limit,
                           backend="host", **geometry("2d"))
    assert y is out and rel_err(y, ref) < 1e-5
    dw_prior = rng.standard_normal(w.shape).astype(np.float32)
    ref_dw = 2.0 * grouped_backward_filter(up(x), up(dy), w.shape, 1, **geometry("2d")) - up(dw_prior)
    out = channels_last(dw_prior)
    dw = pyooc.conv_backward_filter(channels_last(x), channels_last(dy), w.shape, alpha=2.0, beta=-1.0, out=out,
                                    memory_limit=1 << 13, backend="host", **geometry("2d"))
    assert dw is out and rel_err(dw, ref_dw) < 1e-5


def test_degenerate_arrays_are_both_layouts(rng):
    """C == 1 (or a 1x1 image) makes channels-first and channels-last strides alike: such an array
    goes with either layout, and the call takes the layout of the array that decides."""
    x = rng.standard_normal((2, 1, 7, 6)).astype(np.float32)  # C == 1: both at once
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    ref = grouped_forward(up(x), up(w), 1)
    y = pyooc.conv_forward(x, channels_last(w), backend="host")  # w (also C/g == 1) is both too
    assert y.flags.c_contiguous and rel_err(y, ref) < 1e-5
    xs = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    ws = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)  # 1x1 kernel: w is both
    y = pyooc.conv_forward(channels_last(xs), ws, backend="host")
    assert is_channels_last(y) and rel_err(y, grouped_forward(up(xs), up(ws), 1)) < 1e-5


def test_mixed_layouts_are_refused_naming_the_argument(rng):
    x, w, dy, _, _ = problem(rng, "2d", np.float32)
    with pytest.raises(ValueError, match="^w is channels-first .* but x is channels-last"):
        pyooc.conv_forward(channels_last(x), w, padding=1, backend="host")
    with pytest.raises(ValueError, match="^w is channels-last but x is channels-first"):
        pyooc.conv_forward(x, channels_last(w), padding=1, backend="host")
    with pytest.raises(ValueError, match="^w is channels-first .* but dy is channels-last"):
        pyooc.conv_backward_data(channels_last(dy), w, x.shape, padding=1, backend="host")
    with pytest.raises(ValueError, match="^dy is channels-first .* but x is channels-last"):
        pyooc.conv_backward_filter(channels_last(x), dy, w.shape, padding=1, backend="host")


def test_out_in_the_wrong_layout_is_refused(rng):
    x, w, dy, _, _ = problem(rng, "2d", np.float32)
    y_shape = (x.shape[0], w.shape[0], 11, 9)
    wrong = np.full(y_shape, np.nan, np.float32)
    with pytest.raises(ValueError, match="^out must be channels-last, as the inputs are"):
        pyooc.conv_forward(channels_last(x), channels_last(w), padding=1, out=wrong, backend="host")
    assert np.isnan(wrong).all()
    wrong = empty_channels_last(y_shape, np.float32)
    with pytest.raises(ValueError, match="^out must be C-contiguous"):
        pyooc.conv_forward(x, w, padding=1, out=wrong, backend="host")
    assert np.isnan(wrong).all()
    with pytest.raises(ValueError, match="^out must be channels-last"):
        pyooc.conv_backward_filter(channels_last(x), channels_last(dy), w.shape, padding=1,
                                   out=np.zeros(w.shape, np.float32), backend="host")


@pytest.mark.parametrize("make", [
    lambda a: np.asfortranarray(a),
    lambda a: a.transpose(0, 1, 3, 2),
    lambda a: channels_last(np.concatenate([a, a], axis=1))[:, ::2],
])
def test_other_strides_are_refused_saying_what_is_served(rng, make):
    x, w, _, _, _ = problem(rng, "2d", np.float32)
    bad = make(x)
    with pytest.raises(ValueError, match="^x must be C-contiguous or channels-last"):
        pyooc.conv_forward(bad, w, padding=1, backend="host")


def test_unbatched_input_must_be_contiguous(rng):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32).transpose(0, 2, 1)  # [C, W, H] seen as "channels-last"
    with pytest.raises(ValueError, match="^x must be C-contiguous when unbatched"):
        pyooc.conv_forward(x, np.zeros((2, 4, 3, 3), np.float32), backend="host")


def _not_served(x, xl):
    """Calls of the operations that do not take channels-last yet, each with a channels-last x."""
    c = x.shape[1]
    ones = np.ones(c, np.float32)
    w = np.ones((c, c, 3, 3), np.float32)
    return {
        "conv_bias_activation_forward": lambda: pyooc.conv_bias_activation_forward(
            xl, w, ones, activation="relu", padding=1, backend="host"),
        "conv_backward_data_filter_bias": lambda: pyooc.conv_backward_data_filter_bias(
            xl, x.copy(), w, padding=1, backend="host"),
    }


@pytest.mark.parametrize("op", list(_not_served(np.zeros((1, 2, 4, 4)), None)))
def test_operations_not_serving_channels_last_say_so(rng, op):
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    xl = channels_last(x)
    with pytest.raises(NotImplementedError, match=r"^x is channels-last \(NHWC strides\): this function serves "
                                                  r"C-contiguous arrays only so far"):
        _not_served(x, xl)[op]()
    assert np.array_equal(xl, x)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (2, 3, 4, 5, 6)])
def test_activations_are_element_wise_in_either_layout(rng, shape, name):
    dtype, tol = DTYPES[name]
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    xl, dyl = channels_last(x), channels_last(dy)
    ref = np.tanh(up(x))
    limit = needed_budget(lambda m: pyooc.plan_activation_forward(shape, dtype=name, memory_limit=m, backend="host"))
    out = empty_channels_last(shape, dtype)
    y = pyooc.activation_forward(xl, "tanh", out=out, memory_limit=limit, backend="host")
    check_result(y, out, ref, tol, f"tanh {name}")
    fresh = pyooc.activation_forward(xl, "tanh", memory_limit=limit, backend="host")
    assert is_channels_last(fresh) and rel_err(up(fresh), ref) < tol
    out = empty_channels_last(shape, dtype)
    limit = needed_budget(lambda m: pyooc.plan_activation_backward(shape, mode="tanh", dtype=name, memory_limit=m,
                                                                   backend="host"))
    dx = pyooc.activation_backward(y, dyl, xl, "tanh", out=out, memory_limit=limit, backend="host")
    check_result(dx, out, up(dyl) * (1 - up(y) ** 2), tol, f"tanh backward {name}")
    inplace = xl.copy(order="K")  # keeps the channels-last strides
    assert is_channels_last(inplace)
    assert pyooc.activation_forward(inplace, "tanh", out=inplace, backend="host") is inplace
    assert rel_err(up(inplace), ref) < tol
    with pytest.raises(ValueError, match="^x is channels-first .* but y is channels-last"):
        pyooc.activation_backward(y, dyl, x, "tanh", backend="host")
    unchanged((x, xl), (dy, dyl))


@pytest.mark.parametrize("name", DTYPES)
def test_add_tensor_broadcasts_a_bias_over_a_channels_last_tensor(rng, name):
    dtype, tol = DTYPES[name]
    c = rng.standard_normal((3, 6, 5, 7)).astype(dtype)
    bias = rng.standard_normal((1, 6, 1, 1)).astype(dtype)  # dense in both layouts
    full = rng.standard_normal((3, 6, 5, 7)).astype(dtype)
    cl = channels_last(c)
    limit = needed_budget(lambda m: pyooc.plan_add_tensor((1, 1, 1, 6), (3, 5, 7, 6), dtype=name, memory_limit=m,
                                                          backend="host"))
    for a, al in ((bias, bias), (full, channels_last(full))):
        ref = 0.5 * up(a) + 2.0 * up(c)
        out = empty_channels_last(c.shape, dtype)
        r = pyooc.add_tensor(al, cl, alpha=0.5, beta=2.0, out=out, memory_limit=limit, backend="host")
        check_result(r, out, ref, tol, f"add {name} {a.shape}")
    in_place = cl.copy(order="K")
    pyooc.add_tensor(bias, in_place, out=in_place, backend="host")
    assert is_channels_last(in_place) and rel_err(up(in_place), up(bias) + up(c)) < tol
    with pytest.raises(ValueError, match="^a is channels-first .* but c is channels-last"):
        pyooc.add_tensor(full, cl, backend="host")


POOLS = {  # (x shape, kernel, stride, padding)
    "1d": ((2, 5, 23), (3,), (2,), (1,)),
    "2d_overlapping": ((3, 6, 13, 11), (3, 3), (2, 1), (1, 0)),
    "3d": ((2, 4, 7, 8, 9), (2, 2, 3), (2, 2, 2), (0, 1, 1)),
}


@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_pad"])
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("case", POOLS)
def test_pooling_forward_and_backward(rng, case, name, mode):
    dtype, tol = DTYPES[name]
    shape, kernel, stride, padding = POOLS[case]
    x = rng.standard_normal(shape).astype(dtype)
    xl = channels_last(x)
    ref = ref_pool(up(x), kernel, stride, padding, mode)
    geometry = dict(stride=stride, padding=padding, mode=mode)
    plan_at = lambda m: pyooc.plan_pool_forward(shape, kernel, stride=stride, padding=padding, dtype=name,  # noqa
                                                memory_limit=m, backend="host", layout="channels_last")
    check_under_budgets(plan_at, lambda out, m: pyooc.pool_forward(xl, kernel, out=out, memory_limit=m, backend="host",
                                                                   **geometry),
                        ref, dtype, tol, f"pool {case} {name} {mode}")
    y = pyooc.pool_forward(xl, kernel, backend="host", **geometry)
    assert is_channels_last(y)
    dy = channels_last(rng.standard_normal(y.shape).astype(dtype))
    ref_dx = ref_pool_grad(up(x), up(dy), kernel, stride, padding, mode)
    back_at = lambda m: pyooc.plan_pool_backward(shape, kernel, stride=stride, padding=padding, dtype=name,  # noqa
                                                 memory_limit=m, backend="host", layout="channels_last")
    check_under_budgets(back_at, lambda out, m: pyooc.pool_backward(y, dy, xl, kernel, out=out, memory_limit=m,
                                                                    backend="host", **geometry),
                        ref_dx, dtype, tol, f"pool grad {case} {name} {mode}")
    unchanged((x, xl))
    with pytest.raises(ValueError, match="^y is channels-last but x is channels-first"):
        pyooc.pool_backward(y, dy, x, kernel, backend="host", **geometry)


def test_spread_over_devices(rng):
    """devices= on virtual host devices: each device's share (and dw's per-device partial sums)
    in the channels-last layout give the single call's results."""
    x, w, dy, bias, groups = problem(rng, "2d_groups_strided", np.float32)
    args = dict(groups=groups, memory_limit=1 << 13, backend="host", **geometry("2d_groups_strided"))
    xl, wl, dyl = channels_last(x), channels_last(w), channels_last(dy)
    for devices in ([0, 1], [0, 1, 2]):
        y = pyooc.conv_forward(xl, wl, bias, devices=devices, **args)
        assert is_channels_last(y)
        assert rel_err(y, grouped_forward(up(x), up(w), groups, up(bias), **geometry("2d_groups_strided"))) < 1e-5
        dw = pyooc.conv_backward_filter(xl, dyl, w.shape, devices=devices, **args)
        assert is_channels_last(dw)
        assert rel_err(dw, grouped_backward_filter(up(x), up(dy), w.shape, groups, **geometry("2d_groups_strided"))) \
            < 1e-5


def test_pin_takes_a_channels_last_array_and_refuses_other_strides(rng):
    """pyooc.pin registers dense memory: a channels-last array is as dense as a C-contiguous one (its
    first element is its memory's start); a strided view is refused naming the layouts it takes.
    Without a GPU the registration itself is the CudaError pin documents."""
    from conftest import HAS_GPU
    xl = channels_last(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    with pytest.raises(ValueError, match="C-contiguous or channels-last"):
        pyooc.pin(xl[:, :, ::2])
    if HAS_GPU:
        assert pyooc.pin(xl) is xl
        pyooc.unpin(xl)
    else:
        with pytest.raises(pyooc.CudaError):
            pyooc.pin(xl)
