"""Half precision (numpy's float16, ml_dtypes' bfloat16) for softmax (forward and backward),
add_tensor and pooling (forward and backward, max / avg / avg excluding padding) on the host
backend: results in the input dtype against float64 references of the same (exactly upcast)
inputs, within fp16 1e-3 / bf16 1e-2 of the norm, on fresh random inputs with NaN-poisoned
outputs, under budgets that force each split kind (uneven edges included); plans stream half the
bytes of float32 ones; mixed and unsupported dtypes are refused naming the argument (batch norm's
too; its numerics: tests/test_half_batchnorm.py). The cuda backend's twins are marked gpu."""

import ml_dtypes
import numpy as np
import pytest

import pyooc
from conftest import needed_budget, rel_err
from layers_helpers import budget_where, poisoned, ref_pool, ref_pool_grad, ref_softmax, ref_softmax_grad, split_set

DTYPES = {"float16": (np.float16, 1e-3), "bfloat16": (ml_dtypes.bfloat16, 1e-2)}
POOL_MODES = ["max", "avg", "avg_exclude_pad"]


def half(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def up(a):
    return np.asarray(a).astype(np.float64)


def check(got, dtype, ref, tol):
    """got: of dtype, every element written (no NaN poison left), within tol of ref's norm."""
    assert got.dtype == dtype
    assert not np.isnan(up(got)).any()
    assert rel_err(up(got), ref) < tol


# --------------------------------------------------------------------------------------------
# softmax


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
@pytest.mark.parametrize("want", [frozenset({"n"}), frozenset({"n", "w"})], ids=["n", "n+space"])
def test_softmax_channel_splits(rng, name, log, want):
    dtype, tol = DTYPES[name]
    shape = (5, 6, 7, 9)  # space 63: uneven edge chunks
    x, dy = half(rng, shape, dtype, 4.0), half(rng, shape, dtype)
    budget = budget_where(lambda b: pyooc.plan_softmax_forward(shape, mode="channel", dtype=name, memory_limit=b,
                                                                backend="host"), want)
    assert budget is not None
    y = pyooc.softmax_forward(x, mode="channel", log=log, out=poisoned(shape, dtype), memory_limit=budget,
                              backend="host")
    plan = pyooc.last_stats()["plan"]
    assert split_set(plan) - {"k"} == want and plan.splits["c"] == 1 and plan.peak_device_bytes <= budget
    check(y, dtype, ref_softmax(up(x), "channel", log), tol)
    dx = pyooc.softmax_backward(y, dy, mode="channel", log=log, out=poisoned(shape, dtype), memory_limit=budget,
                                backend="host")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    check(dx, dtype, ref_softmax_grad(up(y), up(dy), "channel", log), tol)


@pytest.mark.parametrize("name", DTYPES)
def test_softmax_instance_and_in_place(rng, name):
    dtype, tol = DTYPES[name]
    shape = (7, 3, 4, 5)
    x = half(rng, shape, dtype, 4.0)
    y = pyooc.softmax_forward(x, mode="instance", out=poisoned(shape, dtype), memory_limit=3 * 256, backend="host")
    assert split_set(pyooc.last_stats()["plan"]) == {"n"}
    check(y, dtype, ref_softmax(up(x), "instance", False), tol)
    ref = ref_softmax(up(x), "channel", True)
    assert pyooc.softmax_forward(x, log=True, out=x, backend="host") is x
    check(x, dtype, ref, tol)


# --------------------------------------------------------------------------------------------
# add_tensor


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("a_shape, c_shape", [
    pytest.param((1, 4, 1, 1), (3, 4, 13, 11), id="bias2d"),
    pytest.param((3, 4, 13, 11), (3, 4, 13, 11), id="same"),
    pytest.param((2, 1, 1, 1, 4), (2, 3, 5, 3, 4), id="3d-n-w"),
])
def test_add_tensor(rng, name, a_shape, c_shape):
    dtype, tol = DTYPES[name]
    a, c = half(rng, a_shape, dtype), half(rng, c_shape, dtype)
    keep = c.copy()
    ref = 1.5 * up(a) - 0.25 * up(c)
    plan_at = lambda m: pyooc.plan_add_tensor(a_shape, c_shape, dtype=name, memory_limit=m, backend="host")
    limit = 2 * needed_budget(plan_at)
    out = pyooc.add_tensor(a, c, alpha=1.5, beta=-0.25, out=poisoned(c_shape, dtype), memory_limit=limit,
                           backend="host")
    assert pyooc.last_stats()["plan"].num_chunks > 1
    check(out, dtype, ref, tol)
    np.testing.assert_array_equal(up(c), up(keep))
    check(pyooc.add_tensor(a, c, backend="host"), dtype, up(a) + up(c), tol)
    pyooc.add_tensor(a, c, alpha=1.5, beta=-0.25, out=c, memory_limit=limit, backend="host")  # in place
    check(c, dtype, ref, tol)


@pytest.mark.parametrize("name", DTYPES)
def test_add_tensor_in_place_beta_zero_never_reads_c(rng, name):
    dtype, tol = DTYPES[name]
    a = half(rng, (1, 3, 1, 1), dtype)
    c = poisoned((2, 3, 4, 4), dtype)
    pyooc.add_tensor(a, c, beta=0.0, out=c, memory_limit=1024, backend="host")
    check(c, dtype, np.broadcast_to(up(a), c.shape), tol)


# --------------------------------------------------------------------------------------------
# pooling


POOL_SPLITS = [
    (frozenset({"n"}), (1, 0)),
    (frozenset({"n", "c"}), (1, 0)),
    (frozenset({"n", "c", "h"}), (1, 0)),
    (frozenset({"n", "c", "h", "w"}), (1, 1)),
    (frozenset({"n", "c", "h", "w"}), (0, 0)),
]
POOL_SPLIT_IDS = ["n", "n+c", "n+c+padded-h", "all-padded", "all"]


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("mode", POOL_MODES)
@pytest.mark.parametrize("want, padding", POOL_SPLITS, ids=POOL_SPLIT_IDS)
def test_pool_forward_splits(rng, name, mode, want, padding):
    dtype, tol = DTYPES[name]
    # w: overlapping windows, wide enough that a half plan splits it too; edges uneven
    shape, kernel, stride = (5, 3, 13, 47), (3, 3), (2, 1)
    x = half(rng, shape, dtype)
    budget = budget_where(lambda b: pyooc.plan_pool_forward(shape, kernel, stride=stride, padding=padding, dtype=name,
                                                            memory_limit=b, backend="host"), want)
    assert budget is not None, want
    ref = ref_pool(up(x), kernel, stride, padding, mode)
    y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, out=poisoned(ref.shape, dtype),
                           memory_limit=budget, backend="host")
    plan = pyooc.last_stats()["plan"]
    assert split_set(plan) - {"k"} == want and plan.peak_device_bytes <= budget
    check(y, dtype, ref, tol)
    if mode == "max":  # a maximum is one of its window's elements: exact in any dtype
        np.testing.assert_array_equal(up(y), ref)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("mode", POOL_MODES)
@pytest.mark.parametrize("want, padding", [
    (frozenset({"n", "c"}), (1, 0)),
    (frozenset({"n", "c", "w"}), (1, 0)),
    (frozenset({"n", "c", "h", "w"}), (0, 0)),
], ids=["n+c", "n+c+w", "all"])
def test_pool_backward_splits(rng, name, mode, want, padding):
    dtype, tol = DTYPES[name]
    shape, kernel, stride = (3, 3, 20, 33), (3, 3), (2, 1)  # large enough that a half plan splits every dim
    x = half(rng, shape, dtype)
    budget = budget_where(lambda b: pyooc.plan_pool_backward(shape, kernel, stride=stride, padding=padding,
                                                             dtype=name, memory_limit=b, backend="host"), want)
    assert budget is not None, want
    y = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, backend="host")
    assert y.dtype == dtype
    dy = half(rng, y.shape, dtype)
    dx = pyooc.pool_backward(y, dy, x, kernel, stride=stride, padding=padding, mode=mode,
                             out=poisoned(shape, dtype), memory_limit=budget, backend="host")
    plan = pyooc.last_stats()["plan"]
    assert split_set(plan) - {"k"} == want and plan.peak_device_bytes <= budget
    check(dx, dtype, ref_pool_grad(up(x), up(dy), kernel, stride, padding, mode), tol)


@pytest.mark.parametrize("name", DTYPES)
def test_pool_3d_and_unbatched(rng, name):
    dtype, tol = DTYPES[name]
    x = half(rng, (2, 2, 5, 6, 7), dtype)
    for mode in POOL_MODES:
        ref = ref_pool(up(x), (3, 2, 3), (2, 1, 2), (1, 1, 0), mode)
        y = pyooc.pool_forward(x, (3, 2, 3), stride=(2, 1, 2), padding=(1, 1, 0), mode=mode, memory_limit="2KiB",
                               backend="host")
        assert pyooc.last_stats()["plan"].num_chunks > 1
        check(y, dtype, ref, tol)
    y = pyooc.pool_forward(x[0], (2, 2, 2), backend="host")  # unbatched [C, D, H, W]
    check(y, dtype, ref_pool(up(x[:1]), (2, 2, 2), (2, 2, 2), (0, 0, 0), "max")[0], tol)


# --------------------------------------------------------------------------------------------
# what the plans count, and what is refused


PLANS = {
    "softmax_forward": lambda dtype: pyooc.plan_softmax_forward((4, 8, 16, 16), dtype=dtype, backend="host"),
    "softmax_backward": lambda dtype: pyooc.plan_softmax_backward((4, 8, 16, 16), dtype=dtype, backend="host"),
    "add_tensor": lambda dtype: pyooc.plan_add_tensor((1, 8, 1, 1), (4, 8, 16, 16), dtype=dtype, backend="host"),
    "pool_forward": lambda dtype: pyooc.plan_pool_forward((4, 8, 16, 16), 2, dtype=dtype, backend="host"),
    "pool_backward": lambda dtype: pyooc.plan_pool_backward((4, 8, 16, 16), 2, dtype=dtype, backend="host"),
}


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", PLANS)
def test_plans_stream_half_the_bytes(name, op):
    full, halved = PLANS[op]("float32"), PLANS[op](name)
    assert halved.bytes_h2d * 2 == full.bytes_h2d and halved.bytes_d2h * 2 == full.bytes_d2h
    assert halved.bytes_h2d > 0


@pytest.mark.parametrize("name", DTYPES)
def test_a_half_plan_fits_a_budget_in_fewer_chunks(name):
    shape = (8, 16, 32, 32)
    limit = 4 * needed_budget(lambda m: pyooc.plan_softmax_forward(shape, memory_limit=m, backend="host"))
    full = pyooc.plan_softmax_forward(shape, memory_limit=limit, backend="host")
    halved = pyooc.plan_softmax_forward(shape, dtype=name, memory_limit=limit, backend="host")
    assert 1 <= halved.num_chunks < full.num_chunks


X16, B16 = np.ones((2, 3, 4, 4), np.float16), np.ones((1, 3, 1, 1), np.float16)
BF = np.ones((2, 3, 4, 4), ml_dtypes.bfloat16)
ONES, ZEROS = np.ones(3, np.float32), np.zeros(3, np.float32)


@pytest.mark.parametrize("call, pattern", [
    (lambda: pyooc.softmax_backward(X16, BF, backend="host"),
     r"dy must have the dtype of y \(float16\), got bfloat16: mixed dtypes"),
    (lambda: pyooc.add_tensor(B16, X16.astype(np.float32), backend="host"),
     r"c must have the dtype of a \(float16\), got float32: mixed dtypes"),
    (lambda: pyooc.add_tensor(B16, X16, out=BF, backend="host"), r"out must have dtype float16, got bfloat16"),
    (lambda: pyooc.pool_backward(pyooc.pool_forward(X16, 2, backend="host"), np.ones((2, 3, 2, 2), np.float32), X16,
                                 2, backend="host"), r"dy must have the dtype of x \(float16\), got float32"),
    (lambda: pyooc.pool_forward(X16, 2, out=np.ones((2, 3, 2, 2), np.float32), backend="host"),
     r"out must have dtype float16, got float32"),
    (lambda: pyooc.softmax_forward(X16.astype(np.float64), backend="host"),
     r"x must have dtype float32, float16 or bfloat16, got float64"),
    (lambda: pyooc.pool_forward(X16.astype(np.float64), 2, backend="host"),
     r"x must have dtype float32, float16 or bfloat16, got float64"),
    (lambda: pyooc.add_tensor(B16.astype(np.float64), X16, backend="host"),
     r"a must have dtype float32, float16 or bfloat16, got float64"),
    (lambda: pyooc.plan_pool_forward((2, 3, 4, 4), 2, dtype="float64", backend="host"),
     r"dtype must be float32, float16 or bfloat16, got float64"),
    # batch norm: x, dy and y share a dtype; the per-channel arrays are float32 whatever x is
    (lambda: pyooc.batchnorm_backward(X16, X16.astype(ml_dtypes.bfloat16), ONES, ZEROS, ONES, backend="host"),
     r"dy must have the dtype of x \(float16\), got bfloat16: mixed dtypes"),
    (lambda: pyooc.batchnorm_forward_inference(X16, ONES.astype(np.float16), ZEROS, ZEROS, ONES, backend="host"),
     r"scale must have dtype float32, got float16"),
    (lambda: pyooc.batchnorm_forward_training(X16, ONES, ZEROS, out=np.ones(X16.shape, np.float32), backend="host"),
     r"out must have dtype float16, got float32"),
    (lambda: pyooc.batchnorm_forward_training(X16.astype(np.float64), ONES, ZEROS, backend="host"),
     r"x must have dtype float32, float16 or bfloat16, got float64"),
    (lambda: pyooc.plan_batchnorm_backward((2, 3, 4, 4), dtype="int8", backend="host"),
     r"dtype must be float32, float16 or bfloat16, got int8"),
])
def test_mixed_and_unsupported_dtypes_are_refused(call, pattern):
    with pytest.raises(TypeError, match=pattern):
        call()


# --------------------------------------------------------------------------------------------
# the cuda backend (cuDNN's half descriptors; bfloat16 add through the library's own kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("limit", [None, "64KiB"], ids=["whole", "split"])
def test_half_layers_on_the_gpu(rng, name, limit):
    dtype, tol = DTYPES[name]
    shape = (4, 6, 19, 17)
    x, dy = half(rng, shape, dtype, 3.0), half(rng, shape, dtype)
    for log in (False, True):
        y = pyooc.softmax_forward(x, log=log, out=poisoned(shape, dtype), memory_limit=limit, backend="cuda")
        check(y, dtype, ref_softmax(up(x), "channel", log), tol)
        dx = pyooc.softmax_backward(y, dy, log=log, out=poisoned(shape, dtype), memory_limit=limit, backend="cuda")
        check(dx, dtype, ref_softmax_grad(up(y), up(dy), "channel", log), 2 * tol)
    a = half(rng, (1, 6, 1, 1), dtype)
    out = pyooc.add_tensor(a, x, alpha=1.5, beta=-0.25, out=poisoned(shape, dtype), memory_limit=limit,
                           backend="cuda")
    check(out, dtype, 1.5 * up(a) - 0.25 * up(x), tol)
    for mode in POOL_MODES:
        ref = ref_pool(up(x), (3, 3), (2, 1), (1, 0), mode)
        y = pyooc.pool_forward(x, 3, stride=(2, 1), padding=(1, 0), mode=mode, out=poisoned(ref.shape, dtype),
                               memory_limit=limit, backend="cuda")
        check(y, dtype, ref, tol)
        g = half(rng, y.shape, dtype)
        dx = pyooc.pool_backward(y, g, x, 3, stride=(2, 1), padding=(1, 0), mode=mode, out=poisoned(shape, dtype),
                                 memory_limit=limit, backend="cuda")
        check(dx, dtype, ref_pool_grad(up(x), up(g), (3, 3), (2, 1), (1, 0), mode), 2 * tol)
