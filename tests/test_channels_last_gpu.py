"""The GPU twins of tests/test_channels_last.py (marked gpu; skipped without one): channels-last
arrays through the cuda backend's convolution and gradients (cuDNN with NHWC chunk descriptors),
whole and split, pageable and pinned, against float64 references computed on channels-first copies
and against the host backend; torch CUDA tensors in channels_last go in place and come back
channels_last."""

import numpy as np
import pytest

import pyooc
from conftest import rel_err
from layout_helpers import DTYPES, budgets, channels_last, empty_channels_last, is_channels_last, up
from test_channels_last import CASES, geometry, problem
from test_grouped_conv import grouped_backward_data, grouped_backward_filter, grouped_forward

pytestmark = pytest.mark.gpu
GPU_CASES = ["1d_groups", "2d", "2d_groups_strided", "2d_depthwise", "3d", "3d_groups"]


@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("case", GPU_CASES)
def test_forward_and_backward_data(rng, case, name, pinned):
    dtype, tol = DTYPES[name]
    x, w, dy, bias, groups = problem(rng, case, dtype)
    ref = grouped_forward(up(x), up(w), groups, up(bias), **geometry(case))
    ref_dx = grouped_backward_data(up(dy), up(w), x.shape, groups, **geometry(case))
    xl, wl, dyl = channels_last(x), channels_last(w), channels_last(dy)
    if pinned:
        for a in (xl, wl, dyl):
            pyooc.pin(a)
    try:
        common = dict(groups=groups, dtype=name, backend="cuda", layout="channels_last", **geometry(case))
        forward = lambda m: pyooc.plan_conv_forward(x.shape, w.shape, bias=True, memory_limit=m, **common)  # noqa
        data = lambda m: pyooc.plan_conv_backward_data(dy.shape, w.shape, x.shape, memory_limit=m, **common)  # noqa
        for limit in budgets(forward, data):
            out = empty_channels_last(ref.shape, dtype)
            y = pyooc.conv_forward(xl, wl, bias, groups=groups, out=out, memory_limit=limit, backend="cuda",
                                   **geometry(case))
            assert y is out and is_channels_last(y) and rel_err(up(y), ref) < tol, (case, name, limit)
            out = empty_channels_last(x.shape, dtype)
            dx = pyooc.conv_backward_data(dyl, wl, x.shape, groups=groups, out=out, memory_limit=limit,
                                          backend="cuda", **geometry(case))
            assert dx is out and is_channels_last(dx) and rel_err(up(dx), ref_dx) < tol, (case, name, limit)
    finally:
        if pinned:
            for a in (xl, wl, dyl):
                pyooc.unpin(a)


@pytest.mark.parametrize("case", GPU_CASES)
def test_backward_filter_and_bias(rng, case):
    x, w, dy, _, groups = problem(rng, case, np.float32)
    ref = grouped_backward_filter(up(x), up(dy), w.shape, groups, **geometry(case))
    ref_db = up(dy).sum(axis=(0,) + tuple(range(2, dy.ndim)))
    xl, dyl = channels_last(x), channels_last(dy)
    plan_at = lambda m: pyooc.plan_conv_backward_filter(x.shape, dy.shape, w.shape, groups=groups,  # noqa: E731
                                                        memory_limit=m, backend="cuda", layout="channels_last",
                                                        **geometry(case))
    for limit in budgets(plan_at):
        dw = pyooc.conv_backward_filter(xl, dyl, w.shape, groups=groups, memory_limit=limit, backend="cuda",
                                        **geometry(case))
        assert is_channels_last(dw) and rel_err(dw, ref) < 1e-5, (case, limit)
        db = pyooc.conv_backward_bias(dyl, memory_limit=limit, backend="cuda")
        assert rel_err(db, ref_db) < 1e-5, (case, limit)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_half_backward_filter(rng, name):
    dtype, tol = DTYPES[name]
    x, w, dy, _, groups = problem(rng, "2d_groups_strided", dtype)
    ref = grouped_backward_filter(up(x), up(dy), w.shape, groups, **geometry("2d_groups_strided"))
    dw = pyooc.conv_backward_filter(channels_last(x), channels_last(dy), w.shape, groups=groups,
                                    memory_limit=1 << 14, backend="cuda", **geometry("2d_groups_strided"))
    assert dw.dtype == dtype and is_channels_last(dw) and rel_err(up(dw), ref) < tol


def test_cuda_matches_the_host_backend(rng):
    x, w, dy, bias, groups = problem(rng, "3d_groups", np.float32)
    args = dict(groups=groups, memory_limit=1 << 15, **geometry("3d_groups"))
    on = {b: pyooc.conv_forward(channels_last(x), channels_last(w), bias, backend=b, **args) for b in ("host", "cuda")}
    assert rel_err(on["cuda"], on["host"]) < 1e-5


def test_torch_cuda_channels_last_tensors_in_place(rng):
    torch = pytest.importorskip("torch")
    assert torch.cuda.is_available()
    import pyooc.torch as pt
    x = torch.randn(2, 8, 17, 19, device="cuda").contiguous(memory_format=torch.channels_last)
    w = (torch.randn(6, 8, 3, 3, device="cuda") / 8).contiguous(memory_format=torch.channels_last)
    y = pt.functional.conv2d(x, w, padding=1, memory_limit=1 << 16, backend="cuda")
    assert y.is_cuda and y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-5


@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_pad"])
@pytest.mark.parametrize("name", DTYPES)
def test_pooling(rng, name, mode):
    """cuDNN pooling with NHWC chunk descriptors, split with halos, against the reference."""
    from layers_helpers import ref_pool, ref_pool_grad
    dtype, tol = DTYPES[name]
    shape, kernel, stride, padding = (3, 6, 21, 19), (3, 3), (2, 1), (1, 0)
    x = rng.standard_normal(shape).astype(dtype)
    xl = channels_last(x)
    geometry = dict(stride=stride, padding=padding, mode=mode)
    for limit in (1 << 13, None):
        y = pyooc.pool_forward(xl, kernel, memory_limit=limit, backend="cuda", **geometry)
        assert is_channels_last(y) and rel_err(up(y), ref_pool(up(x), kernel, stride, padding, mode)) < tol
        dy = channels_last(rng.standard_normal(y.shape).astype(dtype))
        dx = pyooc.pool_backward(y, dy, xl, kernel, memory_limit=limit, backend="cuda", **geometry)
        assert is_channels_last(dx)
        assert rel_err(up(dx), ref_pool_grad(up(x), up(dy), kernel, stride, padding, mode)) < tol


@pytest.mark.parametrize("name", DTYPES)
def test_activation_and_bias_add(rng, name):
    dtype, tol = DTYPES[name]
    c = rng.standard_normal((3, 6, 17, 15)).astype(dtype)
    bias = rng.standard_normal((1, 6, 1, 1)).astype(dtype)
    cl = channels_last(c)
    r = pyooc.add_tensor(bias, cl, alpha=0.5, memory_limit=1 << 13, backend="cuda")
    assert is_channels_last(r) and rel_err(up(r), 0.5 * up(bias) + up(c)) < tol
    y = pyooc.activation_forward(cl, "relu", memory_limit=1 << 13, backend="cuda")
    assert is_channels_last(y) and rel_err(up(y), np.maximum(up(c), 0)) < tol
