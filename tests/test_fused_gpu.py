"""The fused functions on the cuda backend (cuDNN, FP32) against the float64 references and the
unfused composition, whole and split by small budgets, from pageable and pinned memory. Skipped
without a GPU."""

import numpy as np
import pytest

import pyooc
from backward_helpers import random_backward
from conftest import rel_err
from fused_helpers import (ACTIVATIONS, activation_err, composed_backward, composed_bias_activation, random_forward,
                           reference_bias_activation, run_bias_activation_checked, run_fused_backward_checked)

pytestmark = pytest.mark.gpu
TOL = 2e-5
LIMITS = [pytest.param(None, id="whole"), pytest.param("2MiB", id="split")]


def pinned_copy(a):
    p = pyooc.pinned_empty(a.shape)
    p[...] = a
    return p


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_bias_activation_cuda(rng, activation, limit):
    # x, y and z (3.9 MB) do not fit the split budget together: the cuda planner must split.
    x_shape, w_shape, geometry = (8, 16, 48, 40), (24, 16, 3, 3), dict(padding=1)
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    y, plan = run_bias_activation_checked(x, w, b, z, activation, alpha1=0.75, alpha2=0.5, memory_limit=limit,
                                          backend="cuda", tol=TOL, **geometry)
    if limit is not None:
        assert plan.num_chunks > 1
    composed, _ = composed_bias_activation(x, w, b, z, activation, 0.75, 0.5, memory_limit=limit, backend="cuda",
                                           **geometry)
    _, pre = reference_bias_activation(x, w, b, z, activation, 0.75, 0.5, **geometry)
    assert activation_err(y, composed.astype(np.float64), pre) < 2 * TOL


@pytest.mark.parametrize("in_place", [False, True], ids=["z", "z-in-place"])
def test_bias_activation_cuda_pinned_3d(rng, in_place):
    x_shape, w_shape, geometry = (2, 8, 40, 36, 16), (12, 8, 3, 3, 3), dict(padding=1, stride=(1, 2, 1))  # 2.9 MB
    x, w, b, z = (pinned_copy(a) for a in random_forward(rng, x_shape, w_shape, **geometry))
    _, plan = run_bias_activation_checked(x, w, b, z, "relu", alpha2=1.0, memory_limit="1MiB", backend="cuda",
                                          direct=True, in_place=in_place, tol=TOL, **geometry)
    assert plan.num_chunks > 1


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("x_shape, w_shape, geometry", [
    pytest.param((4, 16, 64, 40), (24, 16, 3, 3), dict(padding=1), id="2d"),
    pytest.param((2, 8, 40, 18, 16), (12, 8, 3, 3, 3), dict(padding=1, stride=(1, 2, 1)), id="3d"),
    pytest.param((6, 8, 180, 30), (8, 8, 1, 3), dict(stride=(3, 1), padding=(0, 1)), id="2d-stride-beyond-kernel"),
])
def test_backward_data_filter_bias_cuda(rng, x_shape, w_shape, geometry, limit):
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    (dx, dw, db), plan = run_fused_backward_checked(x, w, dy, memory_limit=limit, backend="cuda", tol=TOL,
                                                    **geometry)
    if limit is not None:
        assert plan.num_chunks > 1
    cdx, cdw, _, _ = composed_backward(x, w, dy, memory_limit=limit, backend="cuda", **geometry)
    assert rel_err(dx, cdx) < 2 * TOL and rel_err(dw, cdw) < 2 * TOL


def test_backward_data_filter_bias_cuda_pinned_spatial_split(rng):
    """A budget that splits space: dx rows carried on the device between tiles, pinned DMA."""
    x_shape, w_shape, geometry = (1, 8, 240, 24, 20), (8, 8, 3, 3, 3), dict(padding=1)  # x, dy, dx: 3.7 MB each
    x, w, dy = (pinned_copy(a) for a in random_backward(rng, x_shape, w_shape, **geometry))
    (_, _, _), plan = run_fused_backward_checked(x, w, dy, memory_limit="4MiB", backend="cuda", direct=True,
                                                 tol=TOL, **geometry)
    assert plan.scratch_bytes > 0 and plan.num_chunks > 2


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("activation, pass_pre", [("relu", False), ("tanh", False), ("sigmoid", True),
                                                  ("clipped_relu", True), ("elu", True), ("swish", True)])
def test_activation_backward_data_filter_bias_cuda(rng, activation, pass_pre, limit):
    """cuDNN's activation backward in place on the dy tile, then the three gradients."""
    x_shape, w_shape, geometry = (4, 16, 64, 40), (24, 16, 3, 3), dict(padding=1)
    x, w, dy = random_backward(rng, x_shape, w_shape, **geometry)
    pre = rng.standard_normal(dy.shape, dtype=np.float32)
    _, plan = run_fused_backward_checked(x, w, dy, memory_limit=limit, backend="cuda", tol=TOL,
                                         activation=activation, pre=pre, pass_pre=pass_pre, **geometry)
    if limit is not None:
        assert plan.num_chunks > 1


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_pad"])
def test_bias_activation_pooling_cuda(rng, mode, limit):
    """cuDNN's pooling of each finished y tile into the scratch, copied back for the write-back."""
    from test_layers_pool import ref_pool
    x_shape, w_shape, geometry = (4, 16, 64, 40), (24, 16, 3, 3), dict(padding=1)
    pool = dict(pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1))
    x, w, b, z = random_forward(rng, x_shape, w_shape, **geometry)
    out = pyooc.conv_bias_activation_pooling_forward(x, w, b, z=z, alpha2=0.5, pool_mode=mode, memory_limit=limit,
                                                     backend="cuda", **pool, **geometry)
    plan = pyooc.last_stats()["plan"]
    if limit is not None:
        assert plan.num_chunks > 1
    y, pre = reference_bias_activation(x, w, b, z, "relu", 1.0, 0.5, **geometry)
    ref = ref_pool(y, pool["pool_kernel"], pool["pool_stride"], pool["pool_padding"], mode)
    assert rel_err(out, ref) < TOL


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("activation", ["relu", "sigmoid", "identity"])
def test_deconv_bias_activation_cuda(rng, activation, limit):
    """cuDNN's BackwardData as the transposed convolution, bias and activation on each dx tile."""
    from backward_helpers import reference_backward_data
    from fused_helpers import activated, coef_of
    x = rng.standard_normal((8, 24, 40, 30), dtype=np.float32)  # with y: 3.4 MB, over the split budget
    w = (rng.standard_normal((24, 16, 3, 3), dtype=np.float32) / np.float32(12.0)).astype(np.float32)
    b = rng.standard_normal(16, dtype=np.float32)
    y = pyooc.deconv_bias_activation_forward(x, w, b, activation=activation, coef=coef_of(activation), stride=2,
                                             padding=1, output_padding=1, memory_limit=limit, backend="cuda")
    if limit is not None:
        assert pyooc.last_stats()["plan"].num_chunks > 1
    pre = reference_backward_data(x, w, y.shape, stride=2, padding=1) + b.reshape(1, -1, 1, 1)
    assert activation_err(y, activated(pre, activation), pre) < TOL


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("pool", [dict(pool_kernel=(2, 2), pool_stride=(2, 2), pool_padding=(0, 0)),
                                  dict(pool_kernel=(3, 3), pool_stride=(1, 1), pool_padding=(0, 0)),
                                  dict(pool_kernel=(3, 3), pool_stride=(2, 2), pool_padding=(1, 1))],
                         ids=["tiles", "overlap", "padded"])
def test_pooling_activation_backward_cuda(rng, pool, mode, limit):
    """cuDNN's PoolingBackward and ActivationBackward on each tile's windows, then the gradients."""
    from fused_helpers import run_pooled_backward_checked
    x_shape, w_shape, geometry = (4, 16, 64, 40), (24, 16, 3, 3), dict(padding=1)
    x, w, _ = random_backward(rng, x_shape, w_shape, **geometry)
    pre = rng.standard_normal((4, 24, 64, 40), dtype=np.float32)
    _, plan = run_pooled_backward_checked(x, w, pre, rng, "tanh", dict(pool, pool_mode=mode), pass_pre=False,
                                          memory_limit=limit, backend="cuda", tol=TOL, **geometry)
    if limit is not None:
        assert plan.num_chunks > 1
