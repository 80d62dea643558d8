"""deconv_bias_activation_forward on the host backend: y = act(alpha1 * conv_transpose(x, w) +
alpha2 * z + bias) equal to the float64 reference and to the unfused composition
(conv_backward_data, add_tensor for z and bias, activation_forward) for every activation,
output_padding and stride beyond the kernel, under budgets forcing the backward-data planner's
split kinds (n, the output channels, the input channels reduced on the device, each spatial dim of
y; staged and direct DMA); y crosses the link once; argument errors name the argument."""

import numpy as np
import pytest

import pyooc
from backward_helpers import check_backward_tiling, expected_backward_traffic, reference_backward_data
from conftest import host_direct_access, needed_budget, scan_budget
from fused_helpers import ACTIVATIONS, TOL, activated, activation_err, coef_of, fused_split_set


def deconv_shape(x_shape, w_shape, stride, padding, output_padding, dilation=1):
    sd = len(x_shape) - 2
    ex = lambda v: (v,) * sd if isinstance(v, int) else tuple(v)  # noqa: E731
    s, p, op, d = ex(stride), ex(padding), ex(output_padding), ex(dilation)
    return (x_shape[0], w_shape[1]) + tuple((i - 1) * s[k] - 2 * p[k] + d[k] * (w_shape[2 + k] - 1) + op[k] + 1
                                            for k, i in enumerate(x_shape[2:]))


def random_deconv(rng, x_shape, w_shape, geometry):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(w_shape[1:])))).astype(
        np.float32)
    b = rng.standard_normal(w_shape[1], dtype=np.float32)
    z = rng.standard_normal(deconv_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    return x, w, b, z


def reference(x, w, b, z, activation, alpha1, alpha2, stride, padding, output_padding, dilation=1):
    y_shape = deconv_shape(x.shape, w.shape, stride, padding, output_padding, dilation)
    pre = reference_backward_data(x, w, y_shape, stride=stride, padding=padding, dilation=dilation, alpha=alpha1)
    if z is not None:
        pre = pre + alpha2 * z.astype(np.float64)
    if b is not None:
        pre = pre + b.astype(np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
    return activated(pre, activation), pre


def run_checked(x, w, b, z, activation, *, alpha1=1.0, alpha2=0.0, memory_limit=None, direct=False, **geometry):
    ref, pre = reference(x, w, b, z, activation, alpha1, alpha2, **geometry)
    before = [a.copy() for a in (x, w, b, z) if a is not None]
    out = np.full(ref.shape, np.nan, dtype=np.float32)
    y = pyooc.deconv_bias_activation_forward(x, w, b, z=z, activation=activation, coef=coef_of(activation),
                                             alpha1=alpha1, alpha2=alpha2, out=out, memory_limit=memory_limit,
                                             backend="host", **geometry)
    assert y is out and not np.isnan(y).any(), "outputs never written"
    err = activation_err(y, ref, pre)
    assert err < TOL, f"relative error {err:.3e}"
    for a, a0 in zip([a for a in (x, w, b, z) if a is not None], before):
        assert np.array_equal(a, a0), "an input was written"
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.operation == "deconv_bias_activation_forward" and plan.fused
    check_backward_tiling(plan, operation="conv_backward_data")
    h2d, d2h = expected_backward_traffic(plan, direct=direct, beta=alpha2 if z is not None else 0.0,
                                         operation="conv_backward_data")
    h2d += 0 if b is None else b.nbytes  # the bias, resident
    assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (h2d, d2h)
    if not direct:
        assert stats["bytes_h2d"] == plan.bytes_h2d
    assert stats["bytes_d2h"] == plan.bytes_d2h == y.nbytes, "y crosses back once"
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes <= plan.memory_limit
    return y, plan


GEOMETRIES = [
    pytest.param((2, 4, 11), (4, 3, 3), dict(stride=2, padding=1, output_padding=1), id="1d-output-padding"),
    pytest.param((2, 4, 9, 7), (4, 3, 3, 3), dict(stride=1, padding=1, output_padding=0), id="2d"),
    pytest.param((2, 3, 6, 5), (3, 5, 1, 2), dict(stride=(3, 2), padding=(0, 1), output_padding=(2, 1)),
                 id="2d-stride-beyond-kernel"),
    pytest.param((1, 2, 4, 5, 3), (2, 3, 3, 2, 3), dict(stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0),
                                                        dilation=(1, 2, 1)), id="3d-dilated"),
]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("x_shape, w_shape, geometry", GEOMETRIES)
def test_every_activation_equals_reference_and_composition(rng, activation, x_shape, w_shape, geometry):
    x, w, b, z = random_deconv(rng, x_shape, w_shape, geometry)
    y, _ = run_checked(x, w, b, z, activation, alpha1=0.75, alpha2=-0.5, **geometry)
    # the unfused sequence
    composed = pyooc.conv_backward_data(x, w, y.shape, alpha=0.75, stride=geometry["stride"],
                                        padding=geometry["padding"], dilation=geometry.get("dilation", 1),
                                        backend="host")
    pyooc.add_tensor(z, composed, alpha=-0.5, out=composed, backend="host")
    pyooc.add_tensor(b.reshape((1, -1) + (1,) * (x.ndim - 2)), composed, out=composed, backend="host")
    if activation != "identity":
        pyooc.activation_forward(composed, activation, coef=coef_of(activation), out=composed, backend="host")
    _, pre = reference(x, w, b, z, activation, 0.75, -0.5, **geometry)
    assert activation_err(y, composed.astype(np.float64), pre) < 2 * TOL


SPLITS = [  # the backward-data plan's names: n, c (y's channels), k (x's channels, reduced), y's spatial dims
    pytest.param((9, 1, 30), (1, 1, 3), dict(stride=2, padding=1, output_padding=1), "n", id="n"),
    pytest.param((1, 1, 30), (1, 13, 3), dict(stride=2, padding=1, output_padding=1), "c", id="out-channels"),
    pytest.param((1, 29, 8), (29, 1, 3), dict(stride=1, padding=1, output_padding=0), "k", id="in-channels-reduced"),
    pytest.param((1, 1, 101), (1, 1, 5), dict(stride=2, padding=2, output_padding=1), "w", id="1d-w"),
    pytest.param((1, 1, 67), (1, 1, 2), dict(stride=3, padding=0, output_padding=2), "w", id="1d-w-stride-beyond"),
    pytest.param((1, 1, 51, 4), (1, 1, 3, 3), dict(stride=2, padding=1, output_padding=1), "h", id="2d-h"),
    pytest.param((3, 5, 21, 6), (5, 4, 3, 3), dict(stride=1, padding=1, output_padding=0), "nch", id="2d-n+c+h"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS)
def test_every_split_kind(rng, x_shape, w_shape, geometry, want, direct):
    def plan_at(limit):
        return pyooc.plan_deconv_bias_activation_forward(x_shape, w_shape, z=True, alpha2=0.5, memory_limit=limit,
                                                         backend="host", **geometry)
    start = needed_budget(plan_at)
    limit, planned = scan_budget(plan_at, start, 30 * start, lambda p: fused_split_set(p) == set(want),
                                 f"a split of exactly {want}")
    x, w, b, z = random_deconv(rng, x_shape, w_shape, geometry)
    activation = ACTIVATIONS[sum(map(ord, want)) % len(ACTIVATIONS)]
    with host_direct_access(direct):
        _, plan = run_checked(x, w, b, z, activation, alpha2=0.5, memory_limit=limit, direct=direct, **geometry)
    assert plan.splits == planned.splits


def test_smallest_budget_runs(rng):
    x_shape, w_shape, geometry = (2, 4, 13, 11), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)
    x, w, b, z = random_deconv(rng, x_shape, w_shape, geometry)

    def plan_at(limit):
        return pyooc.plan_deconv_bias_activation_forward(x_shape, w_shape, memory_limit=limit, backend="host",
                                                         **geometry)
    limit = needed_budget(plan_at)
    _, plan = run_checked(x, w, b, None, "relu", memory_limit=limit, **geometry)
    assert plan.peak_device_bytes == limit and plan.num_chunks > 1
    with pytest.raises(MemoryError):
        pyooc.deconv_bias_activation_forward(x, w, b, memory_limit=limit - 1, backend="host", **geometry)


def test_argument_errors(rng):
    x, w, b, z = random_deconv(rng, (1, 4, 6, 6), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1))
    call = pyooc.deconv_bias_activation_forward
    with pytest.raises(ValueError, match="output_padding"):
        call(x, w, b, stride=2, output_padding=2, backend="host")
    with pytest.raises(ValueError, match="output_padding"):
        call(x, w, b, output_padding=(1, 1, 1), backend="host")
    with pytest.raises(ValueError, match="channels"):
        call(x[:, :3].copy(), w, b, backend="host")
    with pytest.raises(ValueError, match="bias"):
        call(x, w, np.zeros(4, np.float32), backend="host")
    with pytest.raises(ValueError, match="needs z"):
        call(x, w, b, alpha2=1.0, backend="host")
    with pytest.raises(ValueError, match="z has shape"):
        call(x, w, b, z=z, alpha2=1.0, backend="host")  # z is for stride 2 with output_padding 1
    y = call(x, w, b, z=z, alpha2=1.0, stride=2, padding=1, output_padding=1, out=z, backend="host")
    assert y is z  # z in place
