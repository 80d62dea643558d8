"""pool_forward on the host backend against a float64 reference: every mode, 1D/2D/3D, padding at
the borders (max over negative inputs, avg_exclude_pad counts), overlapping and gapped windows,
budgets forcing n, c and spatial splits (with halos and uneven edges), and argument checks. The
cuda twins are marked gpu."""

import contextlib

import numpy as np
import pytest

import pyooc
from conftest import host_direct_access, rel_err
from layers_helpers import budget_where, poisoned, ref_pool, ref_pool_grad, split_set

TOL = 1e-5
MODES = ["max", "avg", "avg_exclude_pad"]

GEOMETRIES = [
    pytest.param((2, 3, 17), (3,), (2,), (1,), id="1d-pad"),
    pytest.param((2, 3, 9, 11), (3, 2), (1, 2), (1, 0), id="2d-overlap"),
    pytest.param((1, 2, 10, 9), (2, 2), (3, 3), (0, 1), id="2d-gapped"),
    pytest.param((2, 2, 5, 6, 7), (3, 2, 3), (2, 1, 2), (1, 1, 0), id="3d"),
    pytest.param((1, 1, 4, 4), (4, 4), (4, 4), (2, 2), id="window-mostly-pad"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, kernel, stride, padding", GEOMETRIES)
def test_pool_forward(rng, shape, kernel, stride, padding, mode):
    x = rng.standard_normal(shape).astype(np.float32)
    ref = ref_pool(x, kernel, stride, padding, mode)
    y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, out=poisoned(ref.shape),
                           backend="host")
    assert rel_err(y, ref) < TOL


def test_max_pool_padding_is_minus_infinity(rng):
    """All-negative inputs: a padded border must not turn into 0 (explicit zeros would)."""
    x = (-1.0 - rng.random((2, 3, 7, 8))).astype(np.float32)
    y = pyooc.pool_forward(x, 3, stride=2, padding=1, backend="host")
    assert (y < 0).all()
    assert rel_err(y, ref_pool(x, (3, 3), (2, 2), (1, 1), "max")) < TOL


def test_avg_exclude_pad_counts_only_the_tensor():
    x = np.ones((1, 1, 5, 5), dtype=np.float32)
    y = pyooc.pool_forward(x, 3, stride=1, padding=1, mode="avg_exclude_pad", backend="host")
    np.testing.assert_allclose(y, 1.0, rtol=1e-6)
    y = pyooc.pool_forward(x, 3, stride=1, padding=1, mode="avg", backend="host")
    assert abs(y[0, 0, 0, 0] - 4 / 9) < 1e-6 and abs(y[0, 0, 0, 2] - 6 / 9) < 1e-6 and y[0, 0, 2, 2] == 1


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("want, padding", [
    (frozenset({"n"}), (1, 0)),
    (frozenset({"n", "c"}), (1, 0)),
    (frozenset({"n", "c", "h"}), (1, 0)),
    (frozenset({"n", "c", "h", "w"}), (1, 1)),
    (frozenset({"n", "c", "h", "w"}), (0, 0)),
], ids=["n", "n+c", "n+c+padded-h", "all-padded", "all"])
@pytest.mark.parametrize("mode", ["max", "avg_exclude_pad"])
def test_pool_splits(rng, want, padding, mode, direct):
    shape, kernel, stride = (5, 3, 13, 23), (3, 3), (2, 1)  # w: overlapping windows; edges uneven
    x = rng.standard_normal(shape).astype(np.float32)
    budget = budget_where(lambda b: pyooc.plan_pool_forward(shape, kernel, stride=stride, padding=padding,
                                                            memory_limit=b, backend="host"), want)
    assert budget is not None, want
    with host_direct_access() if direct else contextlib.nullcontext():
        y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode,
                               out=poisoned(ref_pool(x, kernel, stride, padding, mode).shape), memory_limit=budget,
                               backend="host")
    plan = pyooc.last_stats()["plan"]
    assert split_set(plan) - {"k"} == want
    assert plan.peak_device_bytes <= budget
    assert rel_err(y, ref_pool(x, kernel, stride, padding, mode)) < TOL


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_split_padded_dims_keep_the_border_padding(rng, mode, stride):
    """Split padded dims: border chunks keep cuDNN's padding (-inf / uncounted), interior ones
    discard the rows it would touch. Mostly negative inputs, so a zero pad would show in max."""
    shape, kernel, padding = (1, 2, 29, 31, 9), (5, 4, 3), (2, 2, 1)
    x = (rng.standard_normal(shape) - 2).astype(np.float32)
    ref = ref_pool(x, kernel, (stride,) * 3, padding, mode)
    for limit in ["4KiB", "16KiB"]:
        y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, out=poisoned(ref.shape),
                               memory_limit=limit, backend="host")
        plan = pyooc.last_stats()["plan"]
        assert plan.splits["d"] > 1 and plan.peak_device_bytes <= plan.memory_limit
        assert rel_err(y, ref) < TOL


def test_pool_backward_keeps_padded_dims_whole():
    plan = pyooc.plan_pool_backward((1, 1, 64, 64, 64), 3, stride=1, padding=(1, 0, 1), memory_limit="2MiB",
                                    backend="host")
    assert plan.splits["d"] == 1 and plan.splits["w"] == 1 and plan.splits["h"] > 1


def test_pool_bad_input():
    x = np.ones((1, 2, 6, 6), dtype=np.float32)
    with pytest.raises(ValueError, match="pad should be at most half of effective kernel size, but got pad=2, "
                                         "kernel_size=3"):
        pyooc.pool_forward(x, 3, padding=2, backend="host")
    with pytest.raises(ValueError, match="kernel size 9 is larger than the padded input size 8"):
        pyooc.pool_forward(x, 9, padding=1, backend="host")
    with pytest.raises(ValueError, match="pooling mode must be one of 'max', 'avg', 'avg_exclude_pad'; got 'min'"):
        pyooc.pool_forward(x, 2, mode="min", backend="host")
    # (A kernel of 3 sizes would read this 4-D x as unbatched (C, D, H, W), as torch's max_pool3d does.)
    with pytest.raises(ValueError, match="kernel must be an int or a tuple of 2 ints"):
        pyooc.pool_forward(x, (2, 2, 2, 2), backend="host")
    with pytest.raises(ValueError, match="stride must be positive"):
        pyooc.pool_forward(x, 2, stride=0, backend="host")
    with pytest.raises(TypeError, match="x must have dtype float32, float16 or bfloat16, got float64"):
        pyooc.pool_forward(x.astype(np.float64), 2, backend="host")
    with pytest.raises(ValueError, match="rank 3 to 5"):
        pyooc.pool_forward(np.ones((2, 2), np.float32), 1, backend="host")
    with pytest.raises(ValueError, match=r"out has shape \[1, 2, 6, 6\], expected \[1, 2, 3, 3\]"):
        pyooc.pool_forward(x, 2, out=np.empty_like(x), backend="host")


@pytest.mark.gpu
@pytest.mark.parametrize("limit", [None, "64KiB"], ids=["whole", "split"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, kernel, stride, padding", GEOMETRIES)
def test_pool_forward_cuda(rng, shape, kernel, stride, padding, mode, limit):
    x = (rng.standard_normal(shape) - 1.5).astype(np.float32)  # mostly negative: max padding must not be 0
    ref = ref_pool(x, kernel, stride, padding, mode)
    y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, out=poisoned(ref.shape),
                           memory_limit=limit, backend="cuda")
    assert rel_err(y, ref) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_pool_forward_cuda_split_halos(rng, mode):
    shape, kernel, stride = (4, 8, 40, 50, 12), (3, 3, 2), (2, 1, 2)
    x = rng.standard_normal(shape).astype(np.float32)
    ref = ref_pool(x, kernel, stride, (0, 0, 0), mode)
    y = pyooc.pool_forward(x, kernel, stride=stride, mode=mode, out=poisoned(ref.shape), memory_limit="256KiB",
                           backend="cuda")
    plan = pyooc.last_stats()["plan"]
    assert {"n", "c"} <= split_set(plan) and plan.num_chunks > 8
    assert rel_err(y, ref) < TOL


# --------------------------------------------------------------------------------------------
# pool_backward


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, kernel, stride, padding", GEOMETRIES)
def test_pool_backward(rng, shape, kernel, stride, padding, mode):
    x = rng.standard_normal(shape).astype(np.float32)
    y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, backend="host")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = pyooc.pool_backward(y, dy, x, kernel, stride=stride, padding=padding, mode=mode, out=poisoned(x.shape),
                             backend="host")
    assert rel_err(dx, ref_pool_grad(x, dy, kernel, stride, padding, mode)) < TOL
    if mode != "max":  # linear: the adjoint identity <pool(x), dy> = <x, dx>
        lhs = float(np.sum(ref_pool(x, kernel, stride, padding, mode) * dy))
        assert abs(lhs - float(np.sum(x.astype(np.float64) * dx))) < 1e-4 * (1 + abs(lhs))


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("want, padding", [
    (frozenset({"n", "c"}), (1, 0)),
    (frozenset({"n", "c", "w"}), (1, 0)),
    (frozenset({"n", "c", "h", "w"}), (0, 0)),
], ids=["n+c", "n+c+w", "all"])
@pytest.mark.parametrize("kernel, stride", [((3, 3), (2, 1)), ((2, 2), (3, 3))], ids=["overlap", "gapped"])
@pytest.mark.parametrize("mode", MODES)
def test_pool_backward_splits(rng, want, padding, kernel, stride, mode, direct):
    shape = (3, 3, 14, 23)
    if 2 * max(padding) > min(kernel):
        pytest.skip("padding beyond half the kernel")
    x = rng.standard_normal(shape).astype(np.float32)
    budget = budget_where(lambda b: pyooc.plan_pool_backward(shape, kernel, stride=stride, padding=padding,
                                                             memory_limit=b, backend="host"), want)
    assert budget is not None, want
    y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, backend="host")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    with host_direct_access() if direct else contextlib.nullcontext():
        dx = pyooc.pool_backward(y, dy, x, kernel, stride=stride, padding=padding, mode=mode, out=poisoned(shape),
                                 memory_limit=budget, backend="host")
    plan = pyooc.last_stats()["plan"]
    assert split_set(plan) - {"k"} == want and plan.peak_device_bytes <= budget
    assert rel_err(dx, ref_pool_grad(x, dy, kernel, stride, padding, mode)) < TOL


def test_pool_backward_bad_input():
    x = np.ones((1, 2, 6, 6), dtype=np.float32)
    y = np.ones((1, 2, 3, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"dy has shape \[1, 2, 2, 2\], expected \[1, 2, 3, 3\]"):
        pyooc.pool_backward(y, np.ones((1, 2, 2, 2), np.float32), x, 2, backend="host")
    with pytest.raises(ValueError, match="pooling mode must be one of"):
        pyooc.pool_backward(y, y, x, 2, mode="sum", backend="host")
    with pytest.raises(ValueError, match="out overlaps x"):
        pyooc.pool_backward(y, y, x, 2, out=x, backend="host")


@pytest.mark.gpu
@pytest.mark.parametrize("limit", [None, "64KiB"], ids=["whole", "split"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, kernel, stride, padding", GEOMETRIES)
def test_pool_backward_cuda(rng, shape, kernel, stride, padding, mode, limit):
    x = rng.standard_normal(shape).astype(np.float32)
    y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, backend="host")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = pyooc.pool_backward(y, dy, x, kernel, stride=stride, padding=padding, mode=mode, out=poisoned(x.shape),
                             memory_limit=limit, backend="cuda")
    assert rel_err(dx, ref_pool_grad(x, dy, kernel, stride, padding, mode)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_pool_backward_cuda_split_halos(rng, mode):
    shape, kernel, stride = (3, 4, 40, 50, 12), (3, 3, 2), (2, 1, 3)
    x = rng.standard_normal(shape).astype(np.float32)
    y = pyooc.pool_forward(x, kernel, stride=stride, mode=mode, backend="host")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = pyooc.pool_backward(y, dy, x, kernel, stride=stride, mode=mode, out=poisoned(shape), memory_limit="256KiB",
                             backend="cuda")
    plan = pyooc.last_stats()["plan"]
    assert plan.num_chunks > 8 and len(split_set(plan) & {"d", "h", "w"}) > 0
    assert rel_err(dx, ref_pool_grad(x, dy, kernel, stride, (0, 0, 0), mode)) < TOL


@pytest.mark.parametrize("operation", ["forward", "backward"])
def test_pool_plan_targets_tile_the_output_once(operation):
    x_shape, kernel, stride = (2, 3, 23, 19), (3, 3), (2, 1)
    if operation == "forward":
        plan = pyooc.plan_pool_forward(x_shape, kernel, stride=stride, padding=1, memory_limit="4KiB",
                                       backend="host")
        shape = plan.y_shape
    else:
        plan = pyooc.plan_pool_backward(x_shape, kernel, stride=stride, memory_limit="8KiB", backend="host")
        shape = x_shape
    assert plan.num_chunks > 4
    seen = np.zeros(shape, dtype=int)
    for ch in plan.chunks:
        (h0, h1), (w0, w1) = ch["target"]
        seen[ch["n"][0]:ch["n"][1], ch["c"][0]:ch["c"][1], h0:h1, w0:w1] += 1
    assert (seen == 1).all()
