"""The depthwise filter gradient on the GPU (marked gpu), which our own kernel computes
(native/src/backend/cuda/depthwise_kernels.cu; cuDNN's depthwise wgrad was slower than the link):
1-D, 2-D and 3-D, channel multipliers, strides, dilations, a 7x7 kernel wider than one pass of the
kernel, every dtype, budgets from the tightest up (chunks split over groups, samples and space,
partial dw accumulated across chunks), NaN-poisoned out= and alpha/beta blending, against the
float64 group-by-group reference on the same rounded values."""

import numpy as np
import pytest

import pyooc
from conftest import needed_budget, output_shape, rel_err
from layout_helpers import DTYPES, up
from test_grouped_conv import grouped_backward_filter

pytestmark = pytest.mark.gpu

# (x shape, w shape, stride, padding, dilation); groups = x's channels
CASES = {
    "1d_strided": ((3, 6, 41), (6, 1, 5), 2, 2, 1),
    "2d_3x3": ((2, 16, 30, 27), (16, 1, 3, 3), 1, 1, 1),
    "2d_7x7_multiplier2": ((2, 8, 21, 19), (16, 1, 7, 7), 1, 3, 1),
    "3d_dilated": ((2, 8, 9, 10, 11), (8, 1, 3, 3, 3), 1, 2, (2, 1, 2)),
    "3d_multiplier3_strided": ((1, 4, 12, 11, 10), (12, 1, 3, 3, 3), (2, 1, 2), 1, 1),
}


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_depthwise_filter_gradient_on_the_gpu(rng, case, name):
    dtype, tol = DTYPES[name]
    x_shape, w_shape, stride, padding, dilation = CASES[case]
    geometry = dict(stride=stride, padding=padding, dilation=dilation)
    groups = x_shape[1]
    x = rng.standard_normal(x_shape).astype(dtype)
    dy = rng.standard_normal(output_shape(x_shape, w_shape, **geometry)).astype(dtype)
    ref = grouped_backward_filter(up(x), up(dy), w_shape, groups, **geometry)
    needed = needed_budget(lambda m: pyooc.plan_conv_backward_filter(
        x_shape, dy.shape, w_shape, groups=groups, dtype=str(np.dtype(dtype)), memory_limit=m, backend="cuda",
        **geometry))
    for limit in (needed, int(needed * 2.5), None):
        out = np.full(w_shape, np.nan, dtype=dtype)
        got = pyooc.conv_backward_filter(x, dy, w_shape, groups=groups, out=out, memory_limit=limit, backend="cuda",
                                         **geometry)
        assert got is out and not np.isnan(up(got)).any()
        assert rel_err(up(got), ref) < tol, (limit, str(pyooc.last_stats()["plan"]))
    prior = rng.standard_normal(w_shape).astype(dtype)
    blended = prior.copy()
    pyooc.conv_backward_filter(x, dy, w_shape, groups=groups, alpha=0.5, beta=2.0, out=blended, memory_limit=needed,
                               backend="cuda", **geometry)
    assert rel_err(up(blended), 0.5 * ref + 2.0 * up(prior)) < tol
