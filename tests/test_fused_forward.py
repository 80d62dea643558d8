"""conv_bias_activation_forward on the host backend: equal to the float64 reference and to the
unfused pyooc composition (conv_forward + add_tensor + activation_forward) for every activation,
with and without z (and z in place), under budgets that force every split kind of the forward
planner (uneven edges, staged and direct DMA), the smallest budget, and fewer bytes moved than the
composition. Argument errors name the argument."""

import numpy as np
import pytest

import pyooc
from conftest import find_budget, host_direct_access, output_shape, smallest_budget, split_set, uneven_dims
from fused_helpers import (ACTIVATIONS, TOL, activation_err, coef_of, composed_bias_activation, random_forward,
                           reference_bias_activation, run_bias_activation_checked)
from test_conv_host import SPLITS

GEOMETRIES = [
    pytest.param((2, 3, 17), (4, 3, 3), dict(stride=2, padding=1), id="1d"),
    pytest.param((2, 3, 9, 11), (5, 3, 3, 3), dict(padding=1, dilation=(1, 2)), id="2d"),
    pytest.param((1, 2, 6, 7, 8), (3, 2, 3, 3, 3), dict(padding=(1, 0, 2), stride=(1, 2, 1)), id="3d"),
]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("x_shape, w_shape, geometry", GEOMETRIES)
def test_every_activation_equals_reference_and_composition(rng, activation, x_shape, w_shape, geometry):
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    for z_arg, alpha1, alpha2 in ((None, 1.0, 0.0), (z, 0.75, -0.5)):
        y, _ = run_bias_activation_checked(x, w, b, z_arg, activation, alpha1=alpha1, alpha2=alpha2, **geometry)
        composed, _ = composed_bias_activation(x, w, b, z_arg, activation, alpha1, alpha2, **geometry)
        ref, pre = reference_bias_activation(x, w, b, z_arg, activation, alpha1, alpha2, **geometry)
        assert activation_err(composed, ref, pre) < TOL
        assert activation_err(y, composed.astype(np.float64), pre) < 2 * TOL


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("x_shape, w_shape, geometry, want", SPLITS)
def test_every_split_kind(rng, x_shape, w_shape, geometry, want, direct):
    """The forward planner's splits, forced by budgets (z read: beta != 0 in the plan), uneven edges."""
    limit, planned = find_budget(x_shape, w_shape, set(want), uneven=True, bias=True, beta=0.5, **geometry)
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    activation = ACTIVATIONS[sum(map(ord, want)) % len(ACTIVATIONS)]
    with host_direct_access(direct):
        _, plan = run_bias_activation_checked(x, w, b, z, activation, alpha1=1.25, alpha2=0.5, memory_limit=limit,
                                              direct=direct, **geometry)
    assert split_set(plan) == set(want) and uneven_dims(plan), plan.splits
    assert plan.splits == planned.splits and plan.tiles == planned.tiles


@pytest.mark.parametrize("activation", ["relu", "tanh", "identity"])
def test_z_in_place_under_a_split(rng, activation):
    x_shape, w_shape, geometry = (3, 5, 41, 9), (4, 5, 3, 3), dict(padding=1)
    limit, _ = find_budget(x_shape, w_shape, set("nh"), at_least=True, bias=True, beta=1.0, **geometry)
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    y, plan = run_bias_activation_checked(x, w, b, z, activation, alpha2=1.0, memory_limit=limit, in_place=True,
                                          **geometry)
    assert y is z and plan.num_chunks > 1


def test_smallest_budget_runs(rng):
    x_shape, w_shape, geometry = (2, 3, 11, 13), (4, 3, 3, 3), dict(padding=1)
    limit = smallest_budget(x_shape, w_shape, bias=True, beta=1.0, **geometry)
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    _, plan = run_bias_activation_checked(x, w, b, z, "elu", alpha2=1.0, memory_limit=limit, **geometry)
    assert plan.peak_device_bytes == limit
    with pytest.raises(MemoryError):
        pyooc.conv_bias_activation_forward(x, w, b, z=z, alpha2=1.0, memory_limit=limit - 1, backend="host",
                                           **geometry)


def test_moves_fewer_bytes_than_the_composition(rng):
    """y crosses the link once, instead of once out of the conv and twice per following op."""
    x_shape, w_shape, geometry = (2, 8, 24, 24), (8, 8, 3, 3), dict(padding=1)
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    limit = "96KiB"
    plan = pyooc.plan_conv_bias_activation_forward(x_shape, w_shape, z=True, alpha2=1.0, memory_limit=limit,
                                                   backend="host", **geometry)
    assert plan.num_chunks > 1
    y, _ = run_bias_activation_checked(x, w, b, z, "relu", alpha2=1.0, memory_limit=limit, **geometry)
    fused = pyooc.last_stats()["bytes_h2d"] + pyooc.last_stats()["bytes_d2h"]
    assert fused == plan.bytes_h2d + plan.bytes_d2h
    composed, unfused = composed_bias_activation(x, w, b, z, "relu", 1.0, 1.0, memory_limit=limit, **geometry)
    y_bytes = 4 * int(np.prod(output_shape(x_shape, w_shape, **geometry)))
    # the composition moves y out of the conv, and in and out again for z, bias and relu
    assert unfused - fused >= 6 * y_bytes
    np.testing.assert_allclose(y, composed, rtol=1e-5, atol=1e-5)


def test_plan_twin(rng):
    x_shape, w_shape = (2, 3, 20, 20), (4, 3, 3, 3)
    limit = "24KiB"
    with_z = pyooc.plan_conv_bias_activation_forward(x_shape, w_shape, z=True, alpha2=0.5, memory_limit=limit,
                                                     backend="host")
    plain = pyooc.plan_conv_forward(x_shape, w_shape, bias=True, beta=0.5, memory_limit=limit, backend="host")
    assert with_z.operation == "conv_bias_activation_forward" and with_z.fused and not plain.fused
    assert (with_z.splits, with_z.bytes_h2d, with_z.bytes_d2h) == (plain.splits, plain.bytes_h2d, plain.bytes_d2h)
    no_z = pyooc.plan_conv_bias_activation_forward(x_shape, w_shape, memory_limit=limit, backend="host")
    assert no_z.bytes_h2d < with_z.bytes_h2d  # z is not read
    assert "conv_bias_activation_forward" in str(with_z)
    assert with_z.chunks[0].keys() == plain.chunks[0].keys()


def test_argument_errors(rng):
    x, w, b, z = random_forward(rng, (1, 2, 8, 8), (3, 2, 3, 3))
    call = pyooc.conv_bias_activation_forward
    with pytest.raises(ValueError, match="identity"):
        call(x, w, b, activation="mish", backend="host")
    with pytest.raises(TypeError, match="activation"):
        call(x, w, b, activation=3, backend="host")
    with pytest.raises(ValueError, match="coef"):
        call(x, w, b, activation="clipped_relu", backend="host")
    with pytest.raises(ValueError, match="needs z"):
        call(x, w, b, alpha2=1.0, backend="host")
    with pytest.raises(ValueError, match="z has shape"):
        call(x, w, b, z=np.zeros((1, 3, 5, 5), np.float32), alpha2=1.0, backend="host")
    with pytest.raises(ValueError, match="bias"):
        call(x, w, np.zeros(2, np.float32), backend="host")
    with pytest.raises(TypeError, match="z"):
        call(x, w, b, z=z.astype(np.float64), alpha2=1.0, backend="host")
    with pytest.raises(ValueError, match="out overlaps x"):
        call(x, w, b, out=x.reshape(-1)[:108].reshape(1, 3, 6, 6), backend="host")
    with pytest.raises(ValueError, match="needs z"):
        pyooc.plan_conv_bias_activation_forward(x.shape, w.shape, alpha2=1.0, backend="host")
    with pytest.raises(ValueError, match="stride"):
        call(x, w, b, stride=(1, 2, 3), backend="host")
    # alpha2 == 0: z is not read (cuDNN), even when it is full of NaN
    y = call(x, w, b, z=np.full_like(z, np.nan), alpha2=0.0, backend="host")
    assert np.isfinite(y).all()
