"""padding_mode ("reflect", "replicate", "circular") for conv_forward and its gradients on the host
backend: against torch's own F.pad + convolution in float64 (its autograd for dx and dw), every
mode x spatial rank 1-3 x dtype, with strides, dilations, groups and padding="same"'s uneven
padding, under budgets from the tightest up (spatial splits with uneven edges: the halo crosses
the border in the edge chunks), NaN-poisoned outputs, alpha / beta, the pinned (direct-DMA) path,
the plan twins and the plan cache; and bad padding_mode values refused in torch's words."""

import numpy as np
import pytest

import pyooc
from conftest import host_direct_access, needed_budget
from padding_mode_helpers import (CASES, DTYPES, MODES, OPERATIONS, check_close, conv_operation,
                                  random_inputs, run_every_budget, torch_reference)


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_each_operation(rng, mode, case, dtype_name, operation):
    x_shape, w_shape, geometry = CASES[case]
    dtype, tol = DTYPES[dtype_name]
    x, w, dy = random_inputs(rng, x_shape, w_shape, geometry, dtype)
    ref = torch_reference(x, w, dy, x_shape, w_shape, geometry, mode)[OPERATIONS[operation]]
    plan, run, inputs = conv_operation(operation, x, w, dy)
    options = dict(backend="host", padding_mode=mode, **geometry)
    plan_at = lambda m: plan(dtype=dtype_name, memory_limit=m, **options)  # noqa: E731
    if operation == "forward":  # backward data plans the unpadded problem it runs on the padded x
        assert plan_at(None).padding_mode == mode
    run_every_budget(plan_at, lambda m, out: run(out=out, memory_limit=m, **options), ref, dtype, tol,
                      f"{mode} {operation}", inputs)


@pytest.mark.parametrize("mode", MODES)
def test_alpha_beta_scale_each_result(rng, mode):
    """alpha scales the convolution, beta the caller's out, for all three (backward data's beta is
    applied after the fold, to x-shaped out)."""
    x_shape, w_shape, geometry = CASES["2d_grouped_dilated"]
    x, w, dy = random_inputs(rng, x_shape, w_shape, geometry, np.float32)
    y, dx, dw = torch_reference(x, w, dy, x_shape, w_shape, geometry, mode)
    alpha, beta = 0.75, -0.5
    common = dict(alpha=alpha, beta=beta, memory_limit=needed_budget_forward(x_shape, w_shape, geometry, mode),
                  backend="host", padding_mode=mode, **geometry)
    for what, ref, call in (
            ("forward", y, lambda out: pyooc.conv_forward(x, w, out=out, **common)),
            ("backward data", dx, lambda out: pyooc.conv_backward_data(dy, w, x_shape, out=out, **common)),
            ("backward filter", dw, lambda out: pyooc.conv_backward_filter(x, dy, w_shape, out=out, **common))):
        prior = rng.standard_normal(ref.shape).astype(np.float32)
        got = call(prior.copy())
        check_close(got, alpha * ref + beta * prior.astype(np.float64), 1e-5, f"{mode} {what} alpha/beta")


def needed_budget_forward(x_shape, w_shape, geometry, mode):
    """A budget that makes the forward split (twice the tightest)."""
    return 2 * needed_budget(lambda m: pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=m, backend="host",
                                                               padding_mode=mode, **geometry))


@pytest.mark.parametrize("mode", MODES)
def test_pinned_inputs_are_gathered_exactly(rng, mode):
    """Pinned x (the host backend's direct-access hook) goes through the staged gather under a
    padding mode, which computes its halo; w still goes by DMA."""
    x_shape, w_shape, geometry = CASES["3d"]
    x, w, dy = random_inputs(rng, x_shape, w_shape, geometry, np.float32)
    y, _, dw = torch_reference(x, w, dy, x_shape, w_shape, geometry, mode)
    limit = needed_budget_forward(x_shape, w_shape, geometry, mode)
    with host_direct_access():
        got = pyooc.conv_forward(x, w, memory_limit=limit, backend="host", padding_mode=mode, **geometry)
        assert pyooc.last_stats()["chunks"] > 1
        assert pyooc.last_stats()["gather_seconds"] > 0.0, "x went by DMA, which cannot compute its halo"
        check_close(got, y, 1e-5, f"{mode} forward, pinned")
        got = pyooc.conv_backward_filter(x, dy, w_shape, memory_limit=limit, backend="host", padding_mode=mode,
                                         **geometry)
        check_close(got, dw, 1e-5, f"{mode} backward filter, pinned")
        # zeros keeps the direct path (no host gather at all)
        pyooc.conv_forward(x, w, memory_limit=limit, backend="host", **geometry)
        assert pyooc.last_stats()["gather_seconds"] == 0.0


def test_zero_padding_ignores_the_mode(rng):
    """Without padding every mode is the same convolution (and the plan leaves cuDNN's path alone)."""
    x, w, _ = random_inputs(rng, (2, 3, 9, 8), (4, 3, 3, 3), {}, np.float32)
    want = pyooc.conv_forward(x, w, backend="host")
    for mode in MODES:
        np.testing.assert_array_equal(pyooc.conv_forward(x, w, backend="host", padding_mode=mode), want)


def test_plan_cache_tells_modes_apart():
    """A whole padded dimension is cuDNN's under zeros and an explicit halo under a mode: the two
    plans differ (x regions, compute padding), so the cache must not serve one for the other."""
    shapes = (2, 3, 9, 8), (4, 3, 3, 3)
    zeros = pyooc.plan_conv_forward(*shapes, padding=1, backend="host")
    reflect = pyooc.plan_conv_forward(*shapes, padding=1, backend="host", padding_mode="reflect")
    again = pyooc.plan_conv_forward(*shapes, padding=1, backend="host")
    assert (zeros.padding_mode, reflect.padding_mode, again.padding_mode) == ("zeros", "reflect", "zeros")
    assert zeros.chunks[0]["in"] != reflect.chunks[0]["in"], "a mode's chunk reads x's halo"
    assert "padding_mode=reflect" in str(reflect)


CALLS = ["conv_forward", "conv_backward_data", "conv_backward_filter", "plan_conv_forward", "plan_conv_backward_data",
         "plan_conv_backward_filter"]


def _call_args(rng, call, x_shape, w_shape, padding):
    """The positional arguments of `call` for a problem of these shapes (arrays of fresh values)."""
    y_shape = pyooc.plan_conv_forward(x_shape, w_shape, padding=padding, backend="host").y_shape
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, y_shape))
    return {"conv_forward": (x, w), "conv_backward_data": (dy, w, x_shape), "conv_backward_filter": (x, dy, w_shape),
            "plan_conv_forward": (x_shape, w_shape), "plan_conv_backward_data": (y_shape, w_shape, x_shape),
            "plan_conv_backward_filter": (x_shape, y_shape, w_shape)}[call]


@pytest.mark.parametrize("call", CALLS)
def test_bad_padding_mode_is_refused_in_torchs_words(rng, call):
    args = _call_args(rng, call, (1, 2, 5, 4), (3, 2, 3, 3), 1)
    before = [np.copy(a) for a in args]
    for bad in ("zero", "Reflect", "wrap", None, 3):
        with pytest.raises(ValueError, match=r"padding_mode must be one of \['zeros', 'reflect', 'replicate', "
                                             r"'circular'\], but got padding_mode="):
            getattr(pyooc, call)(*args, padding=1, backend="host", padding_mode=bad)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("call", CALLS)
def test_padding_past_what_the_mode_takes_is_refused(rng, call):
    """reflect pads less than a dimension's size, circular at most its size (here 4 elements)."""
    for mode, padding, message in (
            ("reflect", (1, 4), r"padding_mode='reflect': Padding size should be less than the corresponding input "
                                r"dimension, but got: padding \(4, 4\) at dimension 3 of input \[1, 2, 5, 4\]"),
            ("circular", (1, 5), r"padding_mode='circular': Padding value causes wrapping around more than once: "
                                 r"padding \(5, 5\) at dimension 3")):
        args = _call_args(rng, call, (1, 2, 5, 4), (3, 2, 3, 3), padding)
        with pytest.raises(ValueError, match=message):
            getattr(pyooc, call)(*args, padding=padding, backend="host", padding_mode=mode)


def test_too_large_padding_per_mode(rng):
    x = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    w = rng.standard_normal((1, 1, 1, 1)).astype(np.float32)
    with pytest.raises(ValueError, match=r"padding_mode='reflect'.*padding \(3, 3\) at dimension 2 of input "
                                         r"\[1, 1, 3, 4\]"):
        pyooc.conv_forward(x, w, padding=(3, 0), backend="host", padding_mode="reflect")
    with pytest.raises(ValueError, match=r"padding_mode='circular': Padding value causes wrapping around more than "
                                         r"once: padding \(5, 5\) at dimension 3"):
        pyooc.conv_forward(x, w, padding=(0, 5), backend="host", padding_mode="circular")
    # the largest each mode takes, against torch
    for mode, padding in (("reflect", (2, 3)), ("circular", (3, 4)), ("replicate", (7, 9))):
        ref, _, _ = torch_reference(x, w, None, x.shape, w.shape, dict(padding=padding), mode)
        got = pyooc.conv_forward(x, w, padding=padding, backend="host", padding_mode=mode)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_fused_forward_refuses_a_mode(rng):
    x, w, _ = random_inputs(rng, (1, 2, 5, 4), (3, 2, 3, 3), dict(padding=1), np.float32)
    with pytest.raises(NotImplementedError, match="padding_mode='reflect' is not supported by the fused forward"):
        pyooc.conv_bias_activation_forward(x, w, padding=1, backend="host", padding_mode="reflect")
    with pytest.raises(NotImplementedError, match="padding_mode='circular'"):
        pyooc.plan_conv_bias_activation_forward(x.shape, w.shape, padding=1, backend="host", padding_mode="circular")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        pyooc.conv_bias_activation_forward(x, w, padding=1, backend="host", padding_mode="mirror")


@pytest.mark.parametrize("mode", MODES)
def test_spread_over_several_devices(rng, mode):
    """devices=: each (virtual, host-backend) device's pipeline gathers its chunks' halos."""
    x_shape, w_shape, geometry = CASES["3d_one_padding_for_every_dimension"]
    x, w, dy = random_inputs(rng, x_shape, w_shape, geometry, np.float32)
    y, dx, dw = torch_reference(x, w, dy, x_shape, w_shape, geometry, mode)
    common = dict(memory_limit=needed_budget_forward(x_shape, w_shape, geometry, mode), backend="host",
                  devices=[0, 1], padding_mode=mode, **geometry)
    check_close(pyooc.conv_forward(x, w, **common), y, 1e-5, f"{mode} forward on two devices")
    assert pyooc.last_stats()["chunks"] > 1
    check_close(pyooc.conv_backward_filter(x, dy, w_shape, **common), dw, 1e-5, f"{mode} filter on two devices")
    check_close(pyooc.conv_backward_data(dy, w, x_shape, **common), dx, 1e-5, f"{mode} data on two devices")


@pytest.mark.parametrize("call", ["conv_backward_data", "plan_conv_backward_data"])
def test_backward_data_names_the_callers_shapes(rng, call):
    """dy that is not x_shape's forward output is refused naming the caller's x_shape, not the
    padded shape the fold runs on."""
    args = _call_args(rng, call, (1, 2, 6, 5), (3, 2, 3, 3), 1)
    wrong_x = (1, 2, 7, 5)
    args = args[:2] + (wrong_x,)
    with pytest.raises(ValueError, match=r"\[1, 2, 7, 5\]"):
        getattr(pyooc, call)(*args, padding=1, backend="host", padding_mode="reflect")
